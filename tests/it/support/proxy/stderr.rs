//! The reader of the child's stderr: a copy for failure messages, and the address of
//! its `listening on` line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Copy the child's stderr into `buf`, ANSI colours stripped, and send the first
/// `listening on` address to `tx`.
pub(super) fn drain_stderr(
    pipe: std::process::ChildStderr,
    buf: Arc<Mutex<String>>,
    tx: mpsc::Sender<SocketAddr>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    let mut found = false;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = strip_ansi(&String::from_utf8_lossy(&line));
        buf.lock().unwrap().push_str(&text);
        if !found {
            if let Some(addr) = parse_listening(&text) {
                found = true;
                let _ = tx.send(addr);
            }
        }
    }
}

/// The address after `listening on `, up to whitespace or quoting punctuation.
pub(crate) fn parse_listening(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let token: String = rest
        .trim_start_matches(['"', '`', '\''])
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '`' | '\'' | ','))
        .collect();
    token.parse().ok()
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip a CSI sequence: ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
