//! The kinds of canary the proxy mints (docs/reference/dlp.md, "Kinds"): each a value
//! shaped like the credential it stands for, so that code looking for one finds it, and
//! random, so that no legitimate request ever carries it.

/// A kind of canary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 40 random letters and digits.
    Generic,
    /// `AKIA` and 16 upper-case letters and digits.
    AwsAccessKeyId,
    /// 40 characters of the base64 alphabet.
    AwsSecretAccessKey,
    /// `ghp_` and 36 letters and digits.
    GithubToken,
    /// `sk-proj-` and 48 letters, digits, `-` and `_`.
    OpenaiApiKey,
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

impl Kind {
    /// Every kind, as `--canary` and the admin API name them.
    pub const ALL: [Kind; 5] = [
        Kind::Generic,
        Kind::AwsAccessKeyId,
        Kind::AwsSecretAccessKey,
        Kind::GithubToken,
        Kind::OpenaiApiKey,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Generic => "generic",
            Kind::AwsAccessKeyId => "aws_access_key_id",
            Kind::AwsSecretAccessKey => "aws_secret_access_key",
            Kind::GithubToken => "github_token",
            Kind::OpenaiApiKey => "openai_api_key",
        }
    }

    /// The kind `name` names.
    pub fn parse(name: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown canary kind `{name}`: one of {}", known.join(", "))
            })
    }

    /// Its prefix, alphabet and number of random characters.
    fn shape(self) -> (&'static str, &'static [u8], usize) {
        match self {
            Kind::Generic => ("", ALNUM, 40),
            Kind::AwsAccessKeyId => ("AKIA", UPPER_ALNUM, 16),
            Kind::AwsSecretAccessKey => ("", BASE64, 40),
            Kind::GithubToken => ("ghp_", ALNUM, 36),
            Kind::OpenaiApiKey => ("sk-proj-", URL_SAFE, 48),
        }
    }

    /// A fresh random value of this kind, from the operating system's random source.
    /// Unbiased: a byte that would favour the alphabet's first characters is drawn again.
    pub fn mint(self) -> Result<String, getrandom::Error> {
        let (prefix, alphabet, len) = self.shape();
        let limit = 256 - 256 % alphabet.len();
        let mut value = String::with_capacity(prefix.len() + len);
        value.push_str(prefix);
        let mut buf = [0u8; 64];
        while value.len() < prefix.len() + len {
            getrandom::fill(&mut buf)?;
            for &b in buf.iter().filter(|&&b| usize::from(b) < limit) {
                if value.len() == prefix.len() + len {
                    break;
                }
                value.push(char::from(alphabet[usize::from(b) % alphabet.len()]));
            }
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_mints_a_value_of_its_shape_and_two_differ() {
        for kind in Kind::ALL {
            let (prefix, alphabet, len) = kind.shape();
            let a = kind.mint().unwrap();
            assert!(a.starts_with(prefix), "{kind:?}");
            assert_eq!(a.len(), prefix.len() + len, "{kind:?}");
            assert!(a[prefix.len()..].bytes().all(|b| alphabet.contains(&b)));
            assert!(super::super::check_value(a.as_bytes()).is_ok(), "{kind:?}");
            assert_ne!(a, kind.mint().unwrap(), "{kind:?}");
            assert_eq!(Kind::parse(kind.as_str()), Ok(kind));
        }
        assert!(Kind::parse("ssh_key").unwrap_err().contains("github_token"));
    }
}
