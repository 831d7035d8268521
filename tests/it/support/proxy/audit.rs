//! Reading the proxy's audit log, and waiting (bounded) for its records.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Proxy;

/// How long a record may take to reach the audit file (docs/reference/audit-log.md says 1 s).
pub(crate) const AUDIT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long to wait after the expected records for unexpected extra ones.
pub(crate) const QUIET_PERIOD: Duration = Duration::from_millis(300);

impl Proxy {
    /// The audit file's text ("" while it does not exist).
    pub(crate) fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.audit_path).unwrap_or_default()
    }

    /// Proxy stderr and audit file, for failure messages.
    pub(crate) fn diagnostics(&self) -> String {
        format!(
            "--- proxy stderr ---\n{}\n--- audit log {} ---\n{}",
            self.stderr(),
            self.audit_path.display(),
            self.audit_text()
        )
    }

    /// Every complete audit line, parsed. Panics on a line that is not JSON.
    pub(crate) fn audit_lines(&self) -> Vec<Value> {
        let text = self.audit_text();
        let mut lines: Vec<&str> = text.split('\n').collect();
        // The last piece is either "" or a line still being written.
        lines.pop();
        lines
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!(
                        "audit line is not JSON ({e}): {l:?}\n{}",
                        self.diagnostics()
                    )
                })
            })
            .collect()
    }

    /// Wait for the first `egress.allowed` record (needs `audit_allowed`); returns it.
    pub(crate) async fn allowed_record(&self) -> Value {
        self.wait_audit(|r| r["event"] == "egress.allowed", AUDIT_TIMEOUT)
            .await
    }

    /// Wait until a record matches `pred`; returns it. Panics after `timeout`.
    pub(crate) async fn wait_audit(
        &self,
        pred: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Value {
        let started = Instant::now();
        loop {
            if let Some(found) = self.audit_lines().into_iter().find(|v| pred(v)) {
                return found;
            }
            if started.elapsed() > timeout {
                panic!(
                    "no matching audit record within {timeout:?}\n{}",
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Wait until the log holds `n` records, then a quiet period, and assert that
    /// exactly `n` are there. Returns them.
    pub(crate) async fn expect_audit_count(&self, n: usize) -> Vec<Value> {
        let started = Instant::now();
        while self.audit_lines().len() < n {
            if started.elapsed() > AUDIT_TIMEOUT {
                panic!(
                    "expected {n} audit record(s) within {AUDIT_TIMEOUT:?}, found {}\n{}",
                    self.audit_lines().len(),
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tokio::time::sleep(QUIET_PERIOD).await;
        let lines = self.audit_lines();
        assert_eq!(
            lines.len(),
            n,
            "expected exactly {n} audit record(s)\n{}",
            self.diagnostics()
        );
        lines
    }

    /// Wait for exactly one record in the whole log and return it.
    pub(crate) async fn single_audit(&self) -> Value {
        self.expect_audit_count(1).await.remove(0)
    }
}
