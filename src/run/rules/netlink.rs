//! A [`Ruleset`] as the nf_tables netlink batch `nft -f` would send for its text: one
//! transaction, all of it or nothing. Pure bytes, no socket (`apply` sends them).
//!
//! Every rule becomes the expressions nft itself makes of its text (what
//! `nft --debug=netlink -f` prints), so `nft list ruleset` shows the applied table
//! exactly as it shows the table `nft -f` loaded from the printed text
//! (docs/guides/confinement.md, "Sidecars"); `tests/it/run/rules_apply.rs` compares the
//! two in network namespaces.
//!
//! The numbers are those of the kernel's nf_tables netlink interface (what nft itself
//! sends); integer attributes are big-endian, as nf_tables reads them.

use super::nla::{attr, attr_str, attr_u32, cmp, expr, meta, nest, nfproto, payload, REG_1};
use super::{Action, ChainKind, Match, Rule, Ruleset, L4, TABLE};

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;

const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFPROTO_INET: u8 = 1;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_NEWSETELEM: u16 = 12;

/// The `output` hook (`NF_INET_LOCAL_OUT`).
const HOOK_OUTPUT: u32 = 3;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;
const NFT_RETURN: i32 = -5;
const REG_VERDICT: u32 = 0;

/// The batch for `ruleset`, and what each acknowledged message does (by sequence
/// number), to name the one the kernel refuses.
pub(super) struct Batch {
    pub bytes: Vec<u8>,
    pub steps: Vec<(u32, String)>,
}

/// The anonymous sets' name: the kernel numbers it; rules refer to a set by its id in
/// the batch.
const ANON_SET: &str = "__set%d";

pub(super) fn batch(ruleset: &Ruleset, first_seq: u32) -> Batch {
    let mut b = Builder {
        bytes: Vec::new(),
        seq: first_seq,
        steps: Vec::new(),
        sets: 0,
    };
    let table = |a: &mut Vec<u8>| attr_str(a, 1, TABLE);
    b.control(NFNL_MSG_BATCH_BEGIN);
    let create = NLM_F_CREATE | NLM_F_ACK;
    b.message(
        NFT_MSG_NEWTABLE,
        create,
        format!("add table inet {TABLE}"),
        table,
    );
    if ruleset.replace {
        b.message(
            NFT_MSG_DELTABLE,
            NLM_F_ACK,
            format!("delete table inet {TABLE}"),
            table,
        );
        b.message(
            NFT_MSG_NEWTABLE,
            create,
            format!("add table inet {TABLE}"),
            table,
        );
    }
    for chain in &ruleset.chains {
        let kind = match chain.kind {
            ChainKind::Nat => "nat",
            ChainKind::Filter => "filter",
        };
        let policy = if chain.accept_by_default {
            NF_ACCEPT
        } else {
            NF_DROP
        };
        b.message(
            NFT_MSG_NEWCHAIN,
            create,
            format!("add chain {}", chain.name),
            |a| {
                attr_str(a, 1, TABLE);
                attr_str(a, 3, chain.name);
                nest(a, 4, |h| {
                    attr_u32(h, 1, HOOK_OUTPUT);
                    attr_u32(h, 2, chain.priority as u32);
                });
                attr_u32(a, 5, policy);
                attr_str(a, 7, kind);
            },
        );
    }
    for chain in &ruleset.chains {
        for (i, rule) in chain.rules.iter().enumerate() {
            b.rule(chain.name, i + 1, rule);
        }
    }
    b.control(NFNL_MSG_BATCH_END);
    Batch {
        bytes: b.bytes,
        steps: b.steps,
    }
}

struct Builder {
    bytes: Vec<u8>,
    seq: u32,
    steps: Vec<(u32, String)>,
    sets: u32,
}

impl Builder {
    /// The batch's begin or end: addressed to nfnetlink, for the nf_tables subsystem.
    fn control(&mut self, kind: u16) {
        self.header(kind, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES, |_| {});
    }

    fn message(&mut self, msg: u16, flags: u16, step: String, attrs: impl FnOnce(&mut Vec<u8>)) {
        self.steps.push((self.seq, step));
        let kind = (NFNL_SUBSYS_NFTABLES << 8) | msg;
        self.header(kind, NLM_F_REQUEST | flags, NFPROTO_INET, 0, attrs);
    }

    /// One netlink message: its header, the nfgenmsg (family, version 0, resource id)
    /// and the attributes.
    fn header(
        &mut self,
        kind: u16,
        flags: u16,
        family: u8,
        res: u16,
        attrs: impl FnOnce(&mut Vec<u8>),
    ) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 4]);
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
        self.bytes.extend_from_slice(&flags.to_ne_bytes());
        self.bytes.extend_from_slice(&self.seq.to_ne_bytes());
        self.bytes.extend_from_slice(&0u32.to_ne_bytes());
        self.bytes.extend_from_slice(&[family, 0]);
        self.bytes.extend_from_slice(&res.to_be_bytes());
        attrs(&mut self.bytes);
        let len = (self.bytes.len() - start) as u32;
        self.bytes[start..start + 4].copy_from_slice(&len.to_ne_bytes());
        self.seq += 1;
    }

    /// The rule, after the anonymous sets it looks up (created in the same batch).
    fn rule(&mut self, chain: &str, n: usize, rule: &Rule) {
        let mut sets = Vec::new();
        for m in &rule.matches {
            if let Match::L4Proto(protos) = m {
                if protos.len() > 1 {
                    sets.push(self.anonymous_set(protos));
                }
            }
        }
        let mut sets = sets.into_iter();
        let step = format!("add rule {n} of {chain}");
        let flags = NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK;
        self.message(NFT_MSG_NEWRULE, flags, step, |a| {
            attr_str(a, 1, TABLE);
            attr_str(a, 2, chain);
            nest(a, 4, |list| {
                for m in &rule.matches {
                    match_exprs(list, *m, &mut sets);
                }
                action_exprs(list, rule.action);
            });
        });
    }

    /// A constant anonymous set of protocols (key type `inet_proto`, one byte), its id.
    fn anonymous_set(&mut self, protos: &[L4]) -> u32 {
        self.sets += 1;
        let id = self.sets;
        let create = NLM_F_CREATE | NLM_F_ACK;
        self.message(NFT_MSG_NEWSET, create, "add an anonymous set".into(), |a| {
            attr_str(a, 1, TABLE);
            attr_str(a, 2, ANON_SET);
            attr_u32(a, 3, 0x1 | 0x2); // anonymous, constant
            attr_u32(a, 4, 12); // nft's `inet_proto` type
            attr_u32(a, 5, 1);
            nest(a, 9, |d| attr_u32(d, 1, protos.len() as u32));
            attr_u32(a, 10, id);
        });
        self.message(
            NFT_MSG_NEWSETELEM,
            create,
            "add the set's elements".into(),
            |a| {
                attr_str(a, 1, TABLE);
                attr_str(a, 2, ANON_SET);
                attr_u32(a, 4, id);
                nest(a, 3, |list| {
                    for p in protos {
                        nest(list, 1, |e| nest(e, 1, |k| attr(k, 1, &[proto(*p)])));
                    }
                });
            },
        );
        id
    }
}

fn proto(p: L4) -> u8 {
    match p {
        L4::Tcp => 6,
        L4::Udp => 17,
    }
}

fn match_exprs(list: &mut Vec<u8>, m: Match, sets: &mut impl Iterator<Item = u32>) {
    match m {
        Match::SkUid(uid) => {
            meta(list, 10);
            cmp(list, &uid.to_ne_bytes());
        }
        Match::Ipv4 => nfproto(list, NFPROTO_IPV4),
        Match::L4Proto([one]) => {
            meta(list, 16);
            cmp(list, &[proto(*one)]);
        }
        Match::L4Proto(_) => {
            meta(list, 16);
            // `rule` made a set, in order, for every list of more than one protocol.
            let id = sets.next().unwrap_or_default();
            expr(list, "lookup", |d| {
                attr_str(d, 1, ANON_SET);
                attr_u32(d, 2, REG_1);
                attr_u32(d, 4, id);
            });
        }
        Match::DestPort(port) => {
            payload(list, 2, 2, 2);
            cmp(list, &port.to_be_bytes());
        }
        Match::DestV4(net, bits) => {
            // In an `inet` table, an IPv4 header field implies `meta nfproto ipv4`; a
            // prefix of whole bytes is compared as those bytes (as nft does).
            nfproto(list, NFPROTO_IPV4);
            let len = usize::from(bits / 8);
            payload(list, 1, 16, len as u32);
            cmp(list, &net.octets()[..len]);
        }
        Match::DestV6(addr) => {
            nfproto(list, NFPROTO_IPV6);
            payload(list, 1, 24, 16);
            cmp(list, &addr.octets());
        }
        Match::Reply => {
            expr(list, "ct", |d| {
                attr_u32(d, 1, REG_1);
                attr_u32(d, 2, 1); // the direction
            });
            cmp(list, &[1]); // IP_CT_DIR_REPLY
        }
    }
}

fn action_exprs(list: &mut Vec<u8>, action: Action) {
    let verdict = |list: &mut Vec<u8>, code: u32| {
        expr(list, "immediate", |d| {
            attr_u32(d, 1, REG_VERDICT);
            nest(d, 2, |data| nest(data, 2, |v| attr_u32(v, 1, code)));
        });
    };
    match action {
        Action::Accept => verdict(list, NF_ACCEPT),
        Action::Return => verdict(list, NFT_RETURN as u32),
        Action::Redirect(port) => {
            expr(list, "immediate", |d| {
                attr_u32(d, 1, REG_1);
                nest(d, 2, |data| attr(data, 1, &port.to_be_bytes()));
            });
            expr(list, "redir", |d| {
                attr_u32(d, 1, REG_1); // the lowest port, from register 1
                attr_u32(d, 3, 0x2); // NF_NAT_RANGE_PROTO_SPECIFIED
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{sidecar_ruleset, Ports};
    use super::*;

    /// Walk the batch's messages: (type, flags, seq) each, checking every length.
    fn messages(bytes: &[u8]) -> Vec<(u16, u16, u32)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let word = |i: usize| u32::from_ne_bytes(bytes[at + i..at + i + 4].try_into().unwrap());
            let len = word(0) as usize;
            assert!(
                len >= 20 && at + len <= bytes.len() && len.is_multiple_of(4),
                "length {len}"
            );
            let kind = u16::from_ne_bytes([bytes[at + 4], bytes[at + 5]]);
            let flags = u16::from_ne_bytes([bytes[at + 6], bytes[at + 7]]);
            out.push((kind, flags, word(8)));
            at += len;
        }
        out
    }

    #[test]
    fn the_sidecar_batch_replaces_the_table_in_one_transaction() {
        let ruleset = sidecar_ruleset(1337, Ports::default());
        let batch = batch(&ruleset, 100);
        let msgs = messages(&batch.bytes);
        let kinds: Vec<u16> = msgs.iter().map(|m| m.0).collect();
        let nft = |m: u16| (NFNL_SUBSYS_NFTABLES << 8) | m;
        assert_eq!(kinds[0], NFNL_MSG_BATCH_BEGIN);
        assert_eq!(*kinds.last().unwrap(), NFNL_MSG_BATCH_END);
        assert_eq!(
            kinds[1..4],
            [
                nft(NFT_MSG_NEWTABLE),
                nft(NFT_MSG_DELTABLE),
                nft(NFT_MSG_NEWTABLE)
            ]
        );
        let rules = kinds.iter().filter(|k| **k == nft(NFT_MSG_NEWRULE)).count();
        let described: usize = ruleset.chains.iter().map(|c| c.rules.len()).sum();
        assert_eq!(rules, described);
        // One set, `{ tcp, udp }`, made before the rule that looks it up.
        assert_eq!(
            kinds.iter().filter(|k| **k == nft(NFT_MSG_NEWSET)).count(),
            1
        );
        // Sequence numbers count up; every message but begin and end asks for an ack,
        // and the steps name exactly those.
        let seqs: Vec<u32> = msgs.iter().map(|m| m.2).collect();
        assert_eq!(seqs, (100..100 + msgs.len() as u32).collect::<Vec<_>>());
        let acked: Vec<u32> = msgs
            .iter()
            .filter(|m| m.1 & NLM_F_ACK != 0)
            .map(|m| m.2)
            .collect();
        assert_eq!(acked, batch.steps.iter().map(|s| s.0).collect::<Vec<_>>());
    }

    #[test]
    fn the_jail_batch_adds_without_deleting() {
        let ruleset = super::super::describe(Ports::default(), None);
        let kinds: Vec<u16> = messages(&batch(&ruleset, 1).bytes)
            .iter()
            .map(|m| m.0)
            .collect();
        assert!(!kinds.contains(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_DELTABLE)));
    }

    #[test]
    fn a_redirect_loads_its_port_big_endian() {
        let mut list = Vec::new();
        action_exprs(&mut list, Action::Redirect(15053));
        let port = 15053u16.to_be_bytes();
        assert!(list.windows(2).any(|w| w == port), "{list:?}");
        assert!(list.windows(6).any(|w| w == b"redir\0"));
    }
}
