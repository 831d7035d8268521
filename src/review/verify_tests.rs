//! Tests of `audit verify` on logs the real writer makes (`crate::audit`), tampered with
//! as an intruder would: each names the line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::audit::keys::{keygen, Signer};
use crate::audit::{AuditLog, AuditOptions, Format, Record};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("verify-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn record(i: u64) -> Record {
    let mut rec = Record::new(
        "egress.denied",
        crate::audit::new_request_id(),
        format!("127.0.0.1:{}", 40000 + i % 20000),
        "CONNECT".into(),
        format!("host-{i}.test"),
        Some(443),
    );
    rec.reason = Some("not_in_org_allowlist");
    rec.policy_level = Some("org");
    rec
}

/// Writes `n` records through the real writer into `path` (appending to what is there).
fn write_log(path: &Path, n: u64, format: Format, signer: Option<Arc<Signer>>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = AuditOptions {
            format,
            signer,
            ..AuditOptions::default()
        };
        let (log, writer) = AuditLog::open_with(path.to_str().unwrap(), options)
            .await
            .unwrap();
        let task = tokio::spawn(writer.run());
        for i in 0..n {
            log.write(record(i)).await;
        }
        drop(log);
        task.await.unwrap().unwrap();
    });
}

fn lines(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn check(dir: &Path, name: &str, lines: &[Vec<u8>], key: Option<&Path>) -> Report {
    let path = dir.join(name);
    std::fs::write(&path, lines.concat()).unwrap();
    verify(&[path], key).unwrap()
}

fn at(line: u64) -> Loc {
    Loc { file: 0, line }
}

#[test]
fn verify_names_the_first_tampered_line_of_100000_records() {
    let dir = temp_dir("100k");
    let log = dir.join("audit.jsonl");
    write_log(&log, 100_000, Format::Json, None);
    let original = lines(&log);
    assert_eq!(original.len(), 100_000);

    let intact = verify(std::slice::from_ref(&log), None).unwrap();
    assert_eq!(intact.broken, None, "{}", text(&intact));
    assert_eq!(intact.records, 100_000);

    // One byte of a host name changed on line 50,000: line 50,001 names another line.
    let mut changed = original.clone();
    let at_host = changed[49_999]
        .windows(5)
        .position(|w| w == b"host-")
        .unwrap();
    changed[49_999][at_host] = b'g';
    let report = check(&dir, "changed", &changed, None);
    assert_eq!(
        report.broken,
        Some(Break::Changed(at(50_000))),
        "{}",
        text(&report)
    );
    assert!(text(&report).starts_with(&format!(
        "broken: {}:50000: this line was changed",
        report.files[0]
    )));

    // A byte of its own seq changed: the line itself is named.
    let mut renumbered = original.clone();
    let line = String::from_utf8(renumbered[29_999].clone()).unwrap();
    renumbered[29_999] = line
        .replace(",\"seq\":30000,", ",\"seq\":30001,")
        .into_bytes();
    let report = check(&dir, "renumbered", &renumbered, None);
    assert_eq!(
        report.broken,
        Some(Break::Changed(at(30_000))),
        "{}",
        text(&report)
    );

    let mut removed = original.clone();
    removed.remove(59_999);
    let report = check(&dir, "removed", &removed, None);
    assert_eq!(
        report.broken,
        Some(Break::Removed {
            before: at(60_000),
            missing: (60_000, 60_000)
        }),
        "{}",
        text(&report)
    );

    // An inserted copy of an earlier record, and a forged one that links itself in.
    let mut inserted = original.clone();
    inserted.insert(69_999, original[10].clone());
    let report = check(&dir, "inserted", &inserted, None);
    assert_eq!(
        report.broken,
        Some(Break::Inserted(at(70_000))),
        "{}",
        text(&report)
    );
    let mut forged = original.clone();
    let prev = data_encoding::HEXLOWER.encode(&hash(original[69_998].strip_suffix(b"\n").unwrap()));
    let line = format!("{{\"ts\":\"2026-01-01T00:00:00.000Z\",\"event\":\"egress.allowed\",\"host\":\"x.test\",\"seq\":70000,\"prev\":\"{prev}\"}}\n");
    forged.insert(69_999, line.into_bytes());
    let report = check(&dir, "forged", &forged, None);
    assert_eq!(
        report.broken,
        Some(Break::Inserted(at(70_000))),
        "{}",
        text(&report)
    );

    let mut swapped = original.clone();
    swapped.swap(79_999, 80_000);
    let report = check(&dir, "swapped", &swapped, None);
    assert_eq!(
        report.broken,
        Some(Break::Reordered {
            at: at(80_000),
            seq: 80_001,
            expected: 80_000
        }),
        "{}",
        text(&report)
    );

    let mut cut = original.clone();
    let last = cut.last_mut().unwrap();
    last.truncate(last.len() - 10);
    let report = check(&dir, "cut", &cut, None);
    assert_eq!(
        report.broken,
        Some(Break::Cut(at(100_000))),
        "{}",
        text(&report)
    );

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checkpoints_verify_with_their_key_and_not_another() {
    let dir = temp_dir("keys");
    let (private, public) = keygen(&dir.join("k")).unwrap();
    let (_, other) = keygen(&dir.join("other")).unwrap();
    let signer = Arc::new(Signer::load(&private).unwrap());
    let log = dir.join("audit.jsonl");
    write_log(&log, 2_500, Format::Json, Some(signer));
    let original = lines(&log);
    // Two by count (after 1,000 and 2,000 records) and one at shutdown.
    assert_eq!(original.len(), 2_503);
    let checkpoints: Vec<usize> = (0..original.len())
        .filter(|&i| {
            String::from_utf8_lossy(&original[i]).contains("\"event\":\"audit.checkpoint\"")
        })
        .collect();
    assert_eq!(checkpoints, vec![1000, 2001, 2502]);

    let report = verify(std::slice::from_ref(&log), Some(&public)).unwrap();
    assert_eq!(report.broken, None, "{}", text(&report));
    assert_eq!((report.records, report.checkpoints), (2_500, 3));
    assert!(
        text(&report).contains("3 checkpoints signed by key"),
        "{}",
        text(&report)
    );

    let report = verify(std::slice::from_ref(&log), Some(&other)).unwrap();
    assert!(
        matches!(report.broken, Some(Break::OtherKey { at: l, .. }) if l == at(1001)),
        "{}",
        text(&report)
    );

    // A chain rewritten from line 500 on (every later prev recomputed, each seq kept)
    // holds together, but the first checkpoint's signature does not.
    let mut rewritten = original.clone();
    rewritten[499] = String::from_utf8(rewritten[499].clone())
        .unwrap()
        .replace("host-499.test", "host-999.test")
        .into_bytes();
    for i in 500..rewritten.len() {
        let prev =
            data_encoding::HEXLOWER.encode(&hash(rewritten[i - 1].strip_suffix(b"\n").unwrap()));
        let line = String::from_utf8(rewritten[i].clone()).unwrap();
        let at_prev = line.find(",\"prev\":\"").unwrap() + 9;
        rewritten[i] = format!("{}{prev}{}", &line[..at_prev], &line[at_prev + 64..]).into_bytes();
    }
    let report = check(&dir, "rewritten", &rewritten, None);
    assert_eq!(
        report.broken, None,
        "without the key a rewritten chain holds"
    );
    let report = check(&dir, "rewritten", &rewritten, Some(&public));
    assert_eq!(
        report.broken,
        Some(Break::BadSignature(at(1001))),
        "{}",
        text(&report)
    );

    // No checkpoint at all, with a key: nothing verified is not intact.
    let unsigned = dir.join("unsigned.jsonl");
    write_log(&unsigned, 10, Format::Json, None);
    let report = verify(&[unsigned], Some(&public)).unwrap();
    assert_eq!(report.broken, Some(Break::NoCheckpoint));

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_in_order_chain_and_out_of_order_break() {
    let dir = temp_dir("files");
    let log = dir.join("audit.jsonl");
    write_log(&log, 30, Format::Json, None);
    // A restart on the same file goes on from its last line.
    write_log(&log, 20, Format::Json, None);
    let whole = lines(&log);
    assert!(String::from_utf8_lossy(&whole[49]).contains("\"seq\":50,"));
    let (first, second) = (dir.join("a"), dir.join("b"));
    std::fs::write(&first, whole[..30].concat()).unwrap();
    // The second file's lines as a rotation writes them: seq from 1, the first one
    // naming the last line of the first file.
    let rotated = rotate(&whole[29], &whole[30..]);
    std::fs::write(&second, rotated.concat()).unwrap();
    let report = verify(&[first.clone(), second.clone()], None).unwrap();
    assert_eq!(report.broken, None, "{}", text(&report));
    let report = verify(&[second.clone(), first.clone()], None).unwrap();
    assert!(
        matches!(report.broken, Some(Break::NotAfter { .. })),
        "{}",
        text(&report)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `lines` renumbered from 1 after `before`, as the writer seals a new file's lines.
fn rotate(before: &[u8], lines: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut prev = hash(before.strip_suffix(b"\n").unwrap());
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let line = String::from_utf8(line.clone()).unwrap();
        let body = &line[..line.rfind(",\"seq\":").unwrap()];
        let sealed = format!(
            "{body},\"seq\":{},\"prev\":\"{}\"}}",
            i + 1,
            data_encoding::HEXLOWER.encode(&prev)
        );
        prev = hash(sealed.as_bytes());
        out.push(format!("{sealed}\n").into_bytes());
    }
    out
}

#[test]
fn an_ocsf_log_verifies_and_names_the_tampered_line() {
    let dir = temp_dir("ocsf");
    let (private, public) = keygen(&dir.join("k")).unwrap();
    let (_, other) = keygen(&dir.join("other")).unwrap();
    let signer = Arc::new(Signer::load(&private).unwrap());
    let log = dir.join("audit.ocsf.jsonl");
    write_log(&log, 1_500, Format::Ocsf, Some(signer));
    let original = lines(&log);
    // One checkpoint by count (after 1,000 records) and one at shutdown.
    assert_eq!(original.len(), 1_502);
    assert!(String::from_utf8_lossy(&original[0]).starts_with("{\"category_uid\":4,"));
    let report = verify(std::slice::from_ref(&log), Some(&public)).unwrap();
    assert_eq!(report.broken, None, "{}", text(&report));
    assert_eq!((report.records, report.checkpoints), (1_500, 2));
    let report = verify(std::slice::from_ref(&log), Some(&other)).unwrap();
    assert!(
        matches!(report.broken, Some(Break::OtherKey { at: l, .. }) if l == at(1001)),
        "{}",
        text(&report)
    );

    let mut changed = original.clone();
    let line = String::from_utf8(changed[699].clone()).unwrap();
    changed[699] = line.replace("host-699.test", "host-698.test").into_bytes();
    let report = check(&dir, "changed", &changed, None);
    assert_eq!(
        report.broken,
        Some(Break::Changed(at(700))),
        "{}",
        text(&report)
    );

    // Its sequence changed: the line itself is named.
    let mut renumbered = original.clone();
    let line = String::from_utf8(renumbered[299].clone()).unwrap();
    renumbered[299] = line
        .replace("\"sequence\":300}", "\"sequence\":301}")
        .into_bytes();
    let report = check(&dir, "renumbered", &renumbered, None);
    assert_eq!(
        report.broken,
        Some(Break::Changed(at(300))),
        "{}",
        text(&report)
    );

    let mut removed = original.clone();
    removed.remove(599);
    let report = check(&dir, "removed", &removed, None);
    assert_eq!(
        report.broken,
        Some(Break::Removed {
            before: at(600),
            missing: (600, 600)
        }),
        "{}",
        text(&report)
    );

    let mut swapped = original.clone();
    swapped.swap(799, 800);
    let report = check(&dir, "swapped", &swapped, None);
    assert_eq!(
        report.broken,
        Some(Break::Reordered {
            at: at(800),
            seq: 801,
            expected: 800
        }),
        "{}",
        text(&report)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
