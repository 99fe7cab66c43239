//! The model's `always` and `sometimes` properties as predicates over a
//! state (their names are `props.rs`).

use stateright::Property;

use crate::checker::compact::*;
use crate::checker::props;
use crate::checker::state::*;
use crate::checker::system::KeyedEntryModel;

impl KeyedEntryModel {
    pub(super) fn base_properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(props::ONE_RUN_PER_KEY, |_, st: &SystemState| {
                st.sessions.iter().all(|s| {
                    let mut seen = 0u16;
                    s.store.runs.iter().filter_map(|r| r.key).all(|k| {
                        let bit = 1u16 << k;
                        let fresh = seen & bit == 0;
                        seen |= bit;
                        fresh
                    })
                })
            }),
            Property::always(props::INPUT_ONCE, |m: &Self, st: &SystemState| {
                st.clients.iter().enumerate().all(|(c, client)| {
                    let Some(r) = m.current_request(st, c) else {
                        return true;
                    };
                    let epoch = st.sessions[r.session as usize].epoch;
                    r.key.is_none()
                        || client
                            .tasks
                            .iter()
                            .filter(|t| {
                                matches!(&t.phase, Phase::Done(a)
                                    if a.kind == AnswerKind::Started && a.epoch == epoch)
                            })
                            .count()
                            <= 1
                })
            }),
            Property::always(props::KEY_PER_SESSION, |m: &Self, st: &SystemState| {
                (0..m.config.sessions as u8).all(|s| {
                    (0..m.config.keys as u8)
                        .all(|k| m.read_holder(st, s, k).is_none_or(|h| h.session == s))
                })
            }),
            Property::always(props::NAMES_HOLDER, |m: &Self, st: &SystemState| {
                m.answers(st).all(|(_, a)| match a.kind {
                    AnswerKind::Attached
                    | AnswerKind::Replayed
                    | AnswerKind::KeyConflict
                    | AnswerKind::AlreadyCompleted => a.names_holder,
                    _ => true,
                })
            }),
            Property::always(props::DELETE_FREES_KEYS, |m: &Self, st: &SystemState| {
                (0..m.config.sessions as u8).all(|s| {
                    !st.sessions[s as usize].store.is_empty()
                        || (0..m.config.keys as u8).all(|k| m.read_holder(st, s, k).is_none())
                })
            }),
            Property::always(
                props::KEYLESS_NEVER_ATTACHED,
                |m: &Self, st: &SystemState| {
                    m.answers(st).all(|(c, a)| {
                        m.is_keyed(st, c)
                            || !matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed)
                    })
                },
            ),
            Property::always(props::ATTACH_SAME_INPUT, |m: &Self, st: &SystemState| {
                m.answers(st).all(|(_, a)| {
                    !matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed) || a.same_input
                })
            }),
            Property::always(props::KEY_REFUSAL, |_, st: &SystemState| {
                !st.key_refusal_wrong
            }),
            Property::always(props::LOST_RACE_ATTACHES, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .all(|(_, a)| a.kind != AnswerKind::KeyTaken || a.deleted_meanwhile)
            }),
            Property::sometimes(props::SOMETIMES_NEW, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(c, a)| a.kind == AnswerKind::Started && m.is_keyed(st, c))
            }),
            Property::sometimes(props::SOMETIMES_ATTACH, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| a.kind == AnswerKind::Attached)
            }),
            Property::sometimes(props::SOMETIMES_REPLAY, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| a.kind == AnswerKind::Replayed)
            }),
            Property::sometimes(props::SOMETIMES_CONFLICT, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(_, a)| a.kind == AnswerKind::KeyConflict)
            }),
            Property::sometimes(
                props::SOMETIMES_ALREADY_COMPLETED,
                |m: &Self, st: &SystemState| {
                    m.answers(st)
                        .any(|(_, a)| a.kind == AnswerKind::AlreadyCompleted)
                },
            ),
            Property::sometimes(props::SOMETIMES_LOST_RACE, |m: &Self, st: &SystemState| {
                m.answers(st).any(|(_, a)| {
                    a.replanned && matches!(a.kind, AnswerKind::Attached | AnswerKind::Replayed)
                })
            }),
            Property::sometimes(props::SOMETIMES_REUSED, |m: &Self, st: &SystemState| {
                m.answers(st)
                    .any(|(_, a)| a.kind == AnswerKind::Started && a.reused_key)
            }),
        ]
    }
}
