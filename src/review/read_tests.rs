//! Both formats read alike: a log written as OCSF gives `audit summarize`, `suggest` and
//! `replay` the records a log of the record's own JSON gives them.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::audit::{AuditLog, AuditOptions, Format, Record, Via};

fn records() -> Vec<Record> {
    let mut out = Vec::new();
    for i in 0..30u16 {
        let (event, method, port) = match i % 3 {
            0 => ("egress.denied", "CONNECT", Some(443)),
            1 => ("egress.allowed", "GET", Some(80)),
            _ => ("egress.denied", "DNS", None),
        };
        let host = format!(
            "aGVsbG8gd29ybGQgdGhpcyBpcyBkYXRhIGxlYWtpbmcgb3V0.h{}.test",
            i % 4
        );
        let mut rec = Record::new(
            event,
            format!("{i:032x}"),
            format!("[::1]:{}", 40000 + i),
            method.into(),
            host.clone(),
            port,
        );
        rec.ts = format!("2026-11-29T10:{:02}:02.345Z", i);
        rec.session = (i % 2 == 0).then(|| format!("s-{}", i % 5));
        if method == "GET" {
            rec.url = Some(format!("http://{host}/p?q={i}"));
            rec.bytes_up = Some(u64::from(i));
            rec.bytes_down = Some(1000);
            rec.shared_hosting = i % 4 == 1;
        } else {
            rec.reason = Some("not_in_org_allowlist");
            rec.policy_level = Some("org");
        }
        if method == "DNS" {
            rec.via = Via::Dns;
        }
        out.push(rec);
    }
    out
}

fn write_log(path: &Path, format: Format) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = AuditOptions {
            format,
            ..AuditOptions::default()
        };
        let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), options)
            .await
            .unwrap();
        let task = tokio::spawn(writer.run());
        for rec in records() {
            log.write(rec).await;
        }
        drop(log);
        task.await.unwrap().unwrap();
    });
}

/// Each record as read, without `prev` (the hash of a line of its own format).
fn read(path: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for_each_line(path, |line| {
        let mut v: Value = serde_json::from_slice(line).expect("a JSON line");
        v.as_object_mut().unwrap().remove("prev");
        out.push(v);
    })
    .unwrap();
    out
}

fn logs(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("read-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (json, ocsf) = (dir.join("audit.jsonl"), dir.join("audit.ocsf.jsonl"));
    write_log(&json, Format::Json);
    write_log(&ocsf, Format::Ocsf);
    (json, ocsf)
}

#[test]
fn an_ocsf_log_reads_as_the_same_records() {
    let (json, ocsf) = logs("records");
    assert!(std::fs::read_to_string(&ocsf)
        .unwrap()
        .starts_with("{\"category_uid\":4,"));
    let (from_json, from_ocsf) = (read(&json), read(&ocsf));
    assert_eq!(from_json.len(), 30);
    assert_eq!(from_json, from_ocsf);
    let mut malformed = 0;
    let mut attempts = 0;
    for_each_line(&ocsf, |line| {
        let a = attempt(line, &mut malformed).expect("an attempt");
        assert!(a.host.is_some() && a.request_id.is_some());
        attempts += 1;
    })
    .unwrap();
    assert_eq!((attempts, malformed), (30, 0));
    std::fs::remove_dir_all(json.parent().unwrap()).unwrap();
}

#[test]
fn summarize_says_the_same_of_both_formats() {
    let (json, ocsf) = logs("summary");
    let summary = |path: &PathBuf| {
        let mut v = serde_json::to_value(super::super::summarize(&[path], None).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("files");
        v
    };
    let (a, b) = (summary(&json), summary(&ocsf));
    assert_eq!(a["records"], 30);
    assert_eq!(a["malformed"], 0);
    assert_ne!(a["suspected_exfiltration"], Value::Array(Vec::new()));
    assert_eq!(a, b);
    std::fs::remove_dir_all(json.parent().unwrap()).unwrap();
}

#[test]
fn suggest_and_replay_say_the_same_of_both_formats() {
    let (json, ocsf) = logs("decide");
    let dir = json.parent().unwrap();
    let org_text = "version = 1\nallowed_domains = [\"*.h0.test\", \"*.h1.test\"]\n";
    let org_path = dir.join("org.toml");
    std::fs::write(&org_path, org_text).unwrap();
    let org = crate::policy::OrgPolicy::from_toml(org_text, "org.toml").unwrap();
    let without_files = |v: Value| {
        let mut v = v;
        v.as_object_mut().unwrap().remove("files");
        v
    };
    let suggested = |path: &PathBuf| {
        let s = super::super::suggest::suggest(&org, std::slice::from_ref(path)).unwrap();
        without_files(serde_json::to_value(s).unwrap())
    };
    let (a, b) = (suggested(&json), suggested(&ocsf));
    assert_eq!(a["records"], 10, "{a}");
    assert_eq!(a, b);
    let replayed = |path: &PathBuf| {
        let r = super::super::replay::replay(&org_path, None, std::slice::from_ref(path)).unwrap();
        let mut v = without_files(serde_json::to_value(r).unwrap());
        // Destinations of as many records come in no set order.
        for key in ["breaks", "opens"] {
            v[key].as_array_mut().unwrap().sort_by_key(Value::to_string);
        }
        v
    };
    let (a, b) = (replayed(&json), replayed(&ocsf));
    assert_eq!(a["would_break"], 10, "{a}");
    assert_eq!(a["malformed"], 0, "{a}");
    assert_eq!(a, b);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn summarize_shows_secrets_found_first() {
    let dir = std::env::temp_dir().join(format!("egress-review-dlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("audit.jsonl");
    let line = |event: &str, reason: &str, id: &str| {
        format!(
            r#"{{"ts":"2026-12-06T00:00:00.000Z","event":"{event}","host":"a.test","reason":"{reason}","dlp":{{"id":"{id}","kind":"detector","encoding":"plain","found_in":"header"}}}}"#
        )
    };
    let text = [
        line("egress.denied", "secret_detected", "github_token"),
        line("egress.denied", "secret_detected", "github_token"),
        line("egress.flagged", "secret_detected", "jwt"),
    ]
    .join("\n");
    std::fs::write(&log, text).unwrap();
    let s = super::super::summarize(&[&log], None).unwrap();
    let found: Vec<(&str, &str, u64)> = s
        .secrets_found
        .iter()
        .map(|f| (f.event.as_str(), f.id.as_str(), f.count))
        .collect();
    assert_eq!(
        found,
        [
            ("egress.denied", "github_token", 2),
            ("egress.flagged", "jwt", 1)
        ]
    );
    let shown = super::super::text::render(&s);
    let secrets = shown.find("Secrets found").expect("a section");
    assert!(secrets < shown.find("Events").unwrap(), "{shown}");
    std::fs::remove_dir_all(&dir).unwrap();
}
