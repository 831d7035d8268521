//! Tests of the audit record, its time format and its writer.

use super::*;
use std::time::Duration;

fn at(secs: u64, millis: u64) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis))
}

#[test]
fn rfc3339_known_instants() {
    assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
    assert_eq!(at(946_684_799, 999), "1999-12-31T23:59:59.999Z");
    assert_eq!(at(1_795_946_462, 345), "2026-11-29T10:01:02.345Z");
    assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
}

/// The calendar days the hand-written `civil_from_days` was tested on, now through the
/// `time` crate (the day before the epoch is in `review::time`'s test: the record's
/// `ts` writes it as 1970).
#[test]
fn rfc3339_around_leap_days() {
    const DAY: u64 = 86_400;
    assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(at(11_016 * DAY, 0), "2000-02-29T00:00:00.000Z");
    assert_eq!(at(11_017 * DAY, 0), "2000-03-01T00:00:00.000Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(DAY)),
        "1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn clip_url_keeps_short_queries() {
    let url = format!("http://a.test/p?{}", "q".repeat(MAX_QUERY_BYTES));
    assert_eq!(clip_url(&url), (url.clone(), false));
    assert_eq!(
        clip_url("http://a.test/p"),
        ("http://a.test/p".into(), false)
    );
}

#[test]
fn clip_url_cuts_at_256_query_bytes() {
    let url = format!("http://a.test/p?{}", "q".repeat(MAX_QUERY_BYTES + 1));
    let (clipped, cut) = clip_url(&url);
    assert!(cut);
    assert_eq!(
        clipped,
        format!("http://a.test/p?{}", "q".repeat(MAX_QUERY_BYTES))
    );
}

#[test]
fn clip_url_cuts_on_a_char_boundary() {
    // 255 ASCII bytes then a 2-byte 'é' straddling byte 256.
    let url = format!("http://a.test/?{}é{}", "q".repeat(255), "z".repeat(10));
    let (clipped, cut) = clip_url(&url);
    assert!(cut);
    assert_eq!(clipped, format!("http://a.test/?{}", "q".repeat(255)));
}

#[test]
fn clip_url_strips_userinfo() {
    let (clipped, cut) = clip_url("http://user:secret@a.test/p?x=1");
    assert_eq!((clipped.as_str(), cut), ("http://a.test/p?x=1", false));
    let (kept, _) = clip_url("http://a.test/p?mail=a@b");
    assert_eq!(kept, "http://a.test/p?mail=a@b");
}

#[test]
fn request_ids_are_32_hex_digits_and_differ() {
    let (a, b) = (new_request_id(), new_request_id());
    assert_eq!(a.len(), 32);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}

#[test]
fn record_omits_empty_optional_fields() {
    let rec = Record::new(
        "egress.denied",
        "id".into(),
        "127.0.0.1:5".into(),
        "GET".into(),
        "a.test".into(),
        Some(80),
    );
    let v: serde_json::Value = serde_json::to_value(&rec).unwrap();
    for absent in ["url", "url_truncated", "bytes_up", "bytes_down"] {
        assert!(v.get(absent).is_none(), "{absent}");
    }
    for null in ["session", "reason", "rule", "policy_level", "resolved_ip"] {
        assert!(v[null].is_null(), "{null}");
    }
    assert_eq!(v["shared_hosting"], false);
}

fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "egress-audit-{tag}-{}-{}.jsonl",
        std::process::id(),
        new_request_id()
    ))
}

fn record(i: usize) -> Record {
    let mut rec = Record::new(
        "egress.denied",
        format!("r{i}"),
        "127.0.0.1:9".into(),
        "GET".into(),
        "a.test".into(),
        Some(80),
    );
    rec.reason = Some("not_in_org_allowlist");
    rec
}

fn read_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn every_record_is_written_when_the_last_handle_drops() {
    let path = temp_path("drop");
    let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), AuditOptions::default())
        .await
        .unwrap();
    let task = tokio::spawn(writer.run());
    let clone = log.clone();
    for i in 0..1000 {
        if i % 2 == 0 {
            log.write(record(i)).await
        } else {
            clone.write(record(i)).await
        }
    }
    drop((log, clone));
    assert_eq!(task.await.unwrap().unwrap(), 1000);
    let lines = read_lines(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(lines.len(), 1000);
    for (i, v) in lines.iter().enumerate() {
        assert_eq!(v["request_id"], format!("r{i}"));
        assert_eq!(v["reason"], "not_in_org_allowlist");
    }
}

#[tokio::test]
async fn close_writes_what_was_queued_while_clones_live() {
    let path = temp_path("close");
    let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), AuditOptions::default())
        .await
        .unwrap();
    let task = tokio::spawn(writer.run());
    let keeper = log.clone();
    for i in 0..10 {
        log.write(record(i)).await;
    }
    log.close();
    assert_eq!(task.await.unwrap().unwrap(), 10);
    keeper.write(record(99)).await; // after the writer stopped: reported, not written
    let lines = read_lines(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(lines.len(), 10);
}

#[tokio::test]
async fn a_record_reaches_the_file_before_shutdown() {
    let path = temp_path("prompt");
    let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), AuditOptions::default())
        .await
        .unwrap();
    let task = tokio::spawn(writer.run());
    log.write(record(0)).await;
    let mut seen = 0;
    for _ in 0..100 {
        seen = std::fs::read_to_string(&path).unwrap().lines().count();
        if seen == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen, 1, "record not flushed within a second");
    log.close();
    task.await.unwrap().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[tokio::test]
async fn disabled_log_discards() {
    let log = AuditLog::disabled();
    log.write(record(0)).await;
    log.close();
}

/// A subscriber gets each record with the very line the file has (`live.rs`), and a
/// subscriber that does not read holds nothing back: the file gets every record.
#[tokio::test]
async fn subscribers_get_the_files_lines_and_never_hold_it_back() {
    let path = temp_path("live");
    let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), AuditOptions::default())
        .await
        .unwrap();
    let task = tokio::spawn(writer.run());
    let mut reader = log.subscribe();
    let _stuck = log.subscribe();
    let mut rec = record(0);
    rec.session = Some("s1".into());
    log.write(rec).await;
    let live = reader.recv().await.unwrap();
    assert_eq!(
        (live.event, live.session.as_deref()),
        ("egress.denied", Some("s1"))
    );
    let n = super::live::LIVE_QUEUE + 10;
    for i in 1..n {
        log.write(record(i)).await;
    }
    drop(log);
    assert_eq!(task.await.unwrap().unwrap(), n as u64);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(text.lines().next().unwrap().as_bytes(), &live.line[..]);
    assert_eq!(text.lines().count(), n);
}

/// The lines a reopen finds not yet written go to the new file: sealed again from seq
/// 1, the first naming the last line the old file holds, so the two files verify in
/// order (`audit verify`).
#[test]
fn lines_not_written_before_a_reopen_begin_the_new_file_at_seq_1() {
    use super::batch::Batch;
    use super::chain::{Chain, Format};
    let mut chain = Chain::new(Format::Json, None);
    let mut batch = Batch::default();
    for i in 0..5u16 {
        let rec = Record::new(
            "egress.denied",
            format!("r{i}"),
            "127.0.0.1:1".into(),
            "GET".into(),
            "a.test".into(),
            Some(i),
        );
        batch.push(&rec, &mut chain);
    }
    // The old file took two whole lines (a third cut short is written again whole).
    batch.written = batch.line(1).end;
    let before = batch.unwritten_position().unwrap();
    assert_eq!(before.0, 3);
    chain.continue_in(None, before);
    batch.reseal_unwritten(&mut chain);
    assert_eq!(batch.lines, 5);
    assert_eq!(chain.position().0, 4, "three lines in the new file");
    let dir = std::env::temp_dir().join(format!("reseal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (old, new) = (dir.join("old"), dir.join("new"));
    std::fs::write(&old, &batch.bytes[..batch.written]).unwrap();
    std::fs::write(&new, &batch.bytes[batch.written..]).unwrap();
    let first: serde_json::Value =
        serde_json::from_slice(batch.bytes[batch.line(2)].strip_suffix(b"\n").unwrap()).unwrap();
    assert_eq!(first["seq"], 1);
    assert_eq!(first["request_id"], "r2");
    // The new file's first line names the old file's last line (what `audit verify`
    // checks across files given in order, tested in `review::verify_tests`).
    let old_text = std::fs::read_to_string(&old).unwrap();
    let last = old_text.lines().last().unwrap();
    let last_json: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(last_json["seq"], 2);
    let named = data_encoding::HEXLOWER.encode(&super::chain::hash(last.as_bytes()));
    assert_eq!(first["prev"], named.as_str());
    let new_text = std::fs::read_to_string(&new).unwrap();
    let seqs: Vec<u64> = new_text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    std::fs::remove_dir_all(&dir).unwrap();
}
