//! The canaries in a WebSocket's messages sent upstream (docs/reference/dlp.md,
//! "WebSocket messages"): the client's frames are read as they are relayed (RFC 6455
//! 5.2: a header, the payload masked by a 4-byte key), each message's payload unmasked
//! and scanned across its frames and reads, and the relayed bytes held back so no byte
//! that completes a match is sent: the last `hold` raw bytes (the longest form less one
//! byte, which covers at least as many payload bytes), until the message ends. At a
//! message's end everything read goes on, so a client waiting for its answer is never
//! kept waiting; a value split across two messages is not a match.

use std::sync::Arc;

use super::super::budgeted::Sent;
use crate::dlp::{FoundIn, Hit, Lookout};

/// Where the reader is in the client's stream of frames.
enum At {
    /// In a frame's header: its bytes so far.
    Header(Vec<u8>),
    /// In a payload: bytes left, the mask key, the offset into it, and whether the
    /// frame is a control frame (scanned on its own) and ends its message.
    Payload {
        left: u64,
        mask: [u8; 4],
        offset: usize,
        control: bool,
        fin: bool,
    },
}

/// The scan of the bytes a client sends upstream on a WebSocket.
pub(super) struct Upward {
    lookout: Lookout,
    hold: usize,
    at: At,
    /// The unmasked bytes of the current data message not yet scanned, after the last
    /// `hold` of those before (for a match across reads and frames).
    message: Vec<u8>,
    /// The current control frame's unmasked payload not yet scanned, after the last
    /// `hold` of those before (RFC 6455 says at most 125 bytes; a client may lie).
    control: Vec<u8>,
    /// Whether a data message is open (a frame without FIN was read).
    in_message: bool,
    /// Raw bytes read and scanned, not yet sent.
    held: Vec<u8>,
    /// Where the first secret `[dlp] action = "report"` let through is kept.
    sent: Arc<Sent>,
}

/// The length of a header starting with `b0 b1`: 2, with the extended length and mask.
fn header_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if b1 & 0x80 != 0 { 4 } else { 0 }
}

impl Upward {
    /// The scan for `lookout`; a secret only reported goes to `flagged`.
    pub(super) fn new(lookout: Lookout, sent: Arc<Sent>) -> Upward {
        let hold = lookout.hold_back();
        Upward {
            lookout,
            sent,
            hold,
            at: At::Header(Vec::with_capacity(14)),
            message: Vec::new(),
            control: Vec::new(),
            in_message: false,
            held: Vec::new(),
        }
    }

    fn scan(&self, bytes: &[u8]) -> Option<Hit> {
        self.lookout
            .scan(bytes, FoundIn::Websocket, &self.sent.flagged)
    }

    /// Take `raw`, bytes the client sent: the bytes that may go upstream now, or the
    /// canary they carry (then nothing more goes).
    pub(super) fn feed(&mut self, raw: &[u8]) -> Result<Vec<u8>, Hit> {
        self.held.extend_from_slice(raw);
        let mut rest = raw;
        while !rest.is_empty() {
            rest = self.step(rest)?;
        }
        self.scan_message()?;
        let at_boundary = !self.in_message && matches!(&self.at, At::Header(h) if h.is_empty());
        let keep = if at_boundary { 0 } else { self.hold };
        let send = self.held.len().saturating_sub(keep);
        Ok(self.held.drain(..send).collect())
    }

    /// The bytes held back, at the end of the client's stream: everything was scanned.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// Scan what the current message (and control frame) has added, keeping the last
    /// `hold` bytes of each: what is kept is bounded, whatever lengths a client claims.
    fn scan_message(&mut self) -> Result<(), Hit> {
        for bytes in [&self.message, &self.control] {
            if let Some(hit) = self.scan(bytes) {
                return Err(hit);
            }
        }
        let hold = self.hold;
        for bytes in [&mut self.message, &mut self.control] {
            let cut = bytes.len().saturating_sub(hold);
            bytes.drain(..cut);
        }
        Ok(())
    }

    /// One piece of `raw`: a header's bytes or a payload's; what is left.
    fn step<'r>(&mut self, raw: &'r [u8]) -> Result<&'r [u8], Hit> {
        match &mut self.at {
            At::Header(header) => {
                let need = match header.len() {
                    0 | 1 => 2 - header.len(),
                    _ => header_len(header[1]) - header.len(),
                };
                let take = need.min(raw.len());
                header.extend_from_slice(&raw[..take]);
                if header.len() >= 2 && header.len() == header_len(header[1]) {
                    self.begin_payload();
                }
                Ok(&raw[take..])
            }
            At::Payload {
                left,
                mask,
                offset,
                control,
                ..
            } => {
                let take = (*left).min(raw.len() as u64) as usize;
                let into = if *control {
                    &mut self.control
                } else {
                    &mut self.message
                };
                for (i, b) in raw[..take].iter().enumerate() {
                    into.push(b ^ mask[(*offset + i) % 4]);
                }
                *offset += take;
                *left -= take as u64;
                if *left == 0 {
                    self.end_frame()?;
                }
                Ok(&raw[take..])
            }
        }
    }

    /// A complete header: its payload comes next (or, for an empty one, its end).
    fn begin_payload(&mut self) {
        let At::Header(h) = &self.at else { return };
        let (fin, opcode) = (h[0] & 0x80 != 0, h[0] & 0x0f);
        let (len, ext) = match h[1] & 0x7f {
            126 => (u64::from(u16::from_be_bytes([h[2], h[3]])), 2),
            127 => (u64::from_be_bytes(h[2..10].try_into().expect("8 bytes")), 8),
            n => (u64::from(n), 0),
        };
        let mut mask = [0u8; 4];
        if h[1] & 0x80 != 0 {
            mask.copy_from_slice(&h[2 + ext..6 + ext]);
        }
        self.at = At::Payload {
            left: len,
            mask,
            offset: 0,
            control: opcode >= 8,
            fin,
        };
        if len == 0 {
            // Nothing to read: the frame ends with its header. A hit needs bytes, so none.
            let _ = self.end_frame();
        }
    }

    /// A frame read whole: a control frame is scanned on its own; a data frame with FIN
    /// ends its message, which is scanned to its end and forgotten.
    fn end_frame(&mut self) -> Result<(), Hit> {
        let At::Payload { control, fin, .. } = self.at else {
            return Ok(());
        };
        self.at = At::Header(Vec::with_capacity(14));
        if control {
            let control = std::mem::take(&mut self.control);
            return self.scan(&control).map_or(Ok(()), Err);
        }
        self.in_message = !fin;
        if fin {
            let message = std::mem::take(&mut self.message);
            if let Some(hit) = self.scan(&message) {
                return Err(hit);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlp::{Canary, Scanner};

    const VALUE: &[u8] = b"AKIAQ7EGRESSCANARY42";

    fn upward() -> Upward {
        let canary = Canary::new("c1", "generic", VALUE.to_vec());
        let lookout = Lookout::new([Arc::new(Scanner::new(&[canary]))], &Arc::default());
        Upward::new(lookout.unwrap(), Arc::default())
    }

    /// A masked client frame: `opcode`, FIN or not, carrying `payload`.
    fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        let mask = [0x5a, 0x01, 0xc3, 0x7e];
        let mut out = vec![opcode | if fin { 0x80 } else { 0 }];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    /// Feed `raw` in pieces of `size`: what was sent, and whether it tripped.
    fn relay(raw: &[u8], size: usize) -> (Vec<u8>, bool) {
        let mut up = upward();
        let mut sent = Vec::new();
        for piece in raw.chunks(size) {
            match up.feed(piece) {
                Ok(out) => sent.extend(out),
                Err(hit) => {
                    assert_eq!(hit.found_in, FoundIn::Websocket);
                    return (sent, true);
                }
            }
        }
        sent.extend(up.finish());
        (sent, false)
    }

    #[test]
    fn a_value_across_frames_and_reads_trips_before_its_last_byte_is_sent() {
        let mut text = b"{\"msg\": \"".to_vec();
        text.extend_from_slice(VALUE);
        text.extend_from_slice(&[b'x'; 200]);
        let (a, b) = text.split_at(15);
        let raw = [frame(1, false, a), frame(0, true, b)].concat();
        // The value starts after the first frame's 6-byte header and 9 bytes of text:
        // not a byte of it is sent.
        for size in [1, 3, 7, 64, raw.len()] {
            let (sent, tripped) = relay(&raw, size);
            assert!(tripped, "pieces of {size}");
            assert!(sent.len() <= 6 + 9, "{size}: {}", sent.len());
        }
        let ping = frame(9, true, VALUE);
        assert!(relay(&ping, 4).1, "a control frame's payload");
    }

    #[test]
    fn clean_messages_go_through_whole_and_at_once() {
        let near = b"AKIAQ7EGRESSCANARY43";
        let raw = [
            frame(1, true, near),
            frame(2, true, &[7u8; 300]),
            frame(9, true, b""),
        ]
        .concat();
        for size in [1, 5, raw.len()] {
            assert_eq!(relay(&raw, size), (raw.clone(), false), "{size}");
        }
        // A whole message goes on at once: nothing is held back at its end.
        let mut up = upward();
        let one = frame(1, true, b"hello, a short message");
        assert_eq!(up.feed(&one).unwrap(), one);
        // Half a value in one message and half in the next is not a match.
        let (a, b) = VALUE.split_at(10);
        let two = [frame(1, true, a), frame(1, true, b)].concat();
        assert!(!relay(&two, 3).1);
    }

    #[test]
    fn what_is_kept_stays_bounded_whatever_length_a_frame_claims() {
        let mut up = upward();
        for opcode in [9, 2] {
            // A frame claiming 2^40 bytes (a ping may not: a client may lie).
            let mut header = vec![0x80 | opcode, 0x80 | 127];
            header.extend_from_slice(&(1u64 << 40).to_be_bytes());
            header.extend_from_slice(&[1, 2, 3, 4]);
            up.feed(&header).unwrap();
            for _ in 0..100 {
                up.feed(&[b'z'; 1024]).unwrap();
                let kept = up.message.len() + up.control.len() + up.held.len();
                assert!(kept <= 3 * up.hold, "{kept}");
            }
        }
    }
}
