//! Reference stores in this process: the embedded `memory` store, its
//! deliberately broken variants, and the SQL and Redis backends of
//! `reqkey-reference` opened from a store specification.

use std::sync::Arc;

use async_trait::async_trait;
use reqkey_model::seq::answer_to_wire;
use reqkey_reference::store::{dispatch_wire, SessionStateStore};
use serde_json::Value;

use crate::targets::{Level, Target, TargetError};

/// A reference store in this process.
#[derive(Debug)]
pub struct InProcessStore {
    store: Arc<dyn SessionStateStore>,
    name: String,
    /// `broken-memory:keyless-fields-null`: a keyless run's key fields are
    /// written as `null` in every answer.
    keyless_fields_null: bool,
}

impl InProcessStore {
    pub fn new(name: impl Into<String>, store: Arc<dyn SessionStateStore>) -> Self {
        Self {
            store,
            name: name.into(),
            keyless_fields_null: false,
        }
    }

    /// The deliberately broken wire of `broken-memory:keyless-fields-null`.
    pub fn with_keyless_fields_null(mut self) -> Self {
        self.keyless_fields_null = true;
        self
    }
}

#[async_trait]
impl Target for InProcessStore {
    fn level(&self) -> Level {
        Level::Store
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        Ok(serde_json::json!({
            "name": format!("reqkey-reference/{}", self.store.backend()),
            "version": env!("CARGO_PKG_VERSION"),
            "protocol": "reqkey-store/1",
        }))
    }

    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        let mut answer = answer_to_wire(&dispatch_wire(self.store.as_ref(), request).await);
        if self.keyless_fields_null {
            reqkey_reference::store::memory::keyless_fields_null(&mut answer);
        }
        Ok(answer)
    }
}
