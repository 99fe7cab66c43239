//! One operation as the search sees it: its prepared form, whether it
//! counts as unanswered, its instants.

use super::prepare::{writes_nothing, Observed, Prepared};

/// One operation as the search sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Item<'a> {
    pub(super) prepared: &'a Prepared,
    /// Counted as unanswered (in flight at a cut): matches any answer.
    pub(super) in_flight: bool,
    pub(super) invoke_ns: u64,
    pub(super) end_ns: u64,
}

pub(super) const PENDING: Observed = Observed::Pending;

impl<'a> Item<'a> {
    /// `in_flight` forces the op to count as unanswered.
    pub(super) fn of(prepared: &'a [Prepared], i: usize, in_flight: bool) -> Self {
        let p = &prepared[i];
        Item {
            prepared: p,
            in_flight,
            invoke_ns: p.invoke_ns,
            end_ns: if in_flight { u64::MAX } else { p.end_ns },
        }
    }

    pub(super) fn observed(&self) -> &'a Observed {
        if self.in_flight {
            &PENDING
        } else {
            &self.prepared.observed
        }
    }

    /// Does the recorded answer claim the op wrote nothing? Such an op,
    /// when its answer matches, leaves the spec state as it was.
    pub(super) fn quiet(&self) -> bool {
        !matches!(self.observed(), Observed::Pending) && writes_nothing(self.prepared)
    }
}

/// No operation (an empty slot of the search's links).
pub(super) const NONE: usize = usize::MAX;
