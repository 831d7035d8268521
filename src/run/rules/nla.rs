//! The attributes nf_tables messages are made of (netlink's type-length-value, nested
//! where the kernel nests them), and the expressions of a rule built from them.

const NLA_F_NESTED: u16 = 0x8000;
/// The register every loaded value goes to (`NFT_REG_1`).
pub(super) const REG_1: u32 = 1;
const NFPROTO_META: u32 = 15;

pub(super) fn nfproto(list: &mut Vec<u8>, family: u8) {
    meta(list, NFPROTO_META);
    cmp(list, &[family]);
}

/// `meta load KEY => reg 1`.
pub(super) fn meta(list: &mut Vec<u8>, key: u32) {
    expr(list, "meta", |d| {
        attr_u32(d, 1, REG_1);
        attr_u32(d, 2, key);
    });
}

/// `payload load LEN @ BASE + OFFSET => reg 1` (base 1 network, 2 transport header).
pub(super) fn payload(list: &mut Vec<u8>, base: u32, offset: u32, len: u32) {
    expr(list, "payload", |d| {
        attr_u32(d, 1, REG_1);
        attr_u32(d, 2, base);
        attr_u32(d, 3, offset);
        attr_u32(d, 4, len);
    });
}

/// `cmp eq reg 1 VALUE`.
pub(super) fn cmp(list: &mut Vec<u8>, value: &[u8]) {
    expr(list, "cmp", |d| {
        attr_u32(d, 1, REG_1);
        attr_u32(d, 2, 0); // NFT_CMP_EQ
        nest(d, 3, |data| attr(data, 1, value));
    });
}

/// One element of a rule's expression list: its name and its nested data.
pub(super) fn expr(list: &mut Vec<u8>, name: &str, data: impl FnOnce(&mut Vec<u8>)) {
    nest(list, 1, |e| {
        attr_str(e, 1, name);
        nest(e, 2, data);
    });
}

pub(super) fn attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    pad(buf);
}

pub(super) fn attr_u32(buf: &mut Vec<u8>, kind: u16, value: u32) {
    attr(buf, kind, &value.to_be_bytes());
}

/// A string attribute, with the terminating NUL the kernel expects.
pub(super) fn attr_str(buf: &mut Vec<u8>, kind: u16, value: &str) {
    let mut bytes = value.as_bytes().to_vec();
    bytes.push(0);
    attr(buf, kind, &bytes);
}

pub(super) fn nest(buf: &mut Vec<u8>, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 2]);
    buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    inner(buf);
    let len = (buf.len() - start) as u16;
    buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    pad(buf);
}

pub(super) fn pad(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}
