//! gRPC through an intercepted tunnel: Python's grpcio (PyPI) as client and server, the
//! client through the proxy (`grpc.http_proxy`), trusting its CA. A method the rules
//! allow by path is answered, its trailers (status, trailing metadata) passed on, over
//! h2 to the origin; another is refused on its stream and never reaches the origin.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{python_missing, run, show};
use crate::support::org::Org;
use crate::support::proxy::{ProxyBuilder, AUDIT_TIMEOUT};
use crate::support::tls::ca_init;
use crate::support::unique_temp_dir;

/// A unary echo service `pkg.Echo` (`Say`, `Forget`) over TLS with CERT and KEY; prints
/// its port, then a line per call it serves.
const SERVER: &str = r#"
import sys, grpc
from concurrent import futures
cert, key = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
def handler(name):
    def echo(request, context):
        print("served", name, flush=True)
        context.set_trailing_metadata((("x-echo-len", str(len(request))),))
        return request
    return grpc.unary_unary_rpc_method_handler(echo)
service = grpc.method_handlers_generic_handler("pkg.Echo", {"Say": handler("Say"), "Forget": handler("Forget")})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((service,))
port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(((key, cert),)))
server.start()
print("listening", port, flush=True)
server.wait_for_termination()
"#;

/// Call `Say`, `Forget`, `Say` on TARGET through PROXY trusting CA: a line each.
const CLIENT: &str = r#"
import sys, grpc
proxy, ca, target = sys.argv[1], sys.argv[2], sys.argv[3]
creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
options = [("grpc.http_proxy", proxy), ("grpc.enable_http_proxy", 1)]
with grpc.secure_channel(target, creds, options=options) as channel:
    for method in ["/pkg.Echo/Say", "/pkg.Echo/Forget", "/pkg.Echo/Say"]:
        try:
            reply, call = channel.unary_unary(method).with_call(b"hello", timeout=10)
            trailers = dict(call.trailing_metadata())
            print(method, "ok", reply.decode(), trailers.get("x-echo-len"))
        except grpc.RpcError as e:
            print(method, "error", e.code().name)
"#;

/// The grpcio server; killed (by its PID) when dropped.
struct GrpcOrigin {
    child: Child,
    port: u16,
    served: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl GrpcOrigin {
    fn start(cert: &std::path::Path, key: &std::path::Path) -> GrpcOrigin {
        let mut child = Command::new("python3")
            .args(["-c", SERVER])
            .arg(cert)
            .arg(key)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the gRPC origin");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let port = first
            .strip_prefix("listening ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the gRPC origin said {first:?}"));
        let served = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = served.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(name) = line.strip_prefix("served ") {
                    into.lock().unwrap().push(name.to_string());
                }
            }
        });
        GrpcOrigin {
            child,
            port,
            served,
        }
    }
}

impl Drop for GrpcOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_grpc_call_allowed_by_path_is_answered_with_its_trailers_and_another_is_refused() {
    if python_missing("grpc") {
        return;
    }
    let dir = unique_temp_dir("grpc");
    let certified = rcgen::generate_simple_self_signed(vec!["secure.test".into()]).unwrap();
    let (cert, key) = (dir.join("origin.pem"), dir.join("origin-key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    let origin = GrpcOrigin::start(&cert, &key);
    let ca = ca_init(&dir);
    let entry = r#"{ host = "secure.test", paths = ["/pkg.Echo/Say"] }"#;
    let org = Org::new()
        .allow_entry(entry)
        .ports(&[origin.port])
        .loopback()
        .to_toml();
    let policy = serde_json::json!({"type": "allowlist",
        "allowed_domains": [{"host": "secure.test", "paths": ["/pkg.Echo/Say"]}]});
    let proxy = ProxyBuilder::new(org)
        .policy(policy.to_string())
        .pin("secure.test")
        .audit_allowed()
        .arg("--ca")
        .arg(ca.to_str().unwrap())
        .arg("--upstream-ca")
        .arg(cert.to_str().unwrap())
        .start()
        .await;
    let args = vec![
        "-c".to_string(),
        CLIENT.to_string(),
        format!("http://{}", proxy.addr),
        ca.join("ca.pem").display().to_string(),
        format!("secure.test:{}", origin.port),
    ];
    let out = run("python3", args, Duration::from_secs(60)).await;
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [
            "/pkg.Echo/Say ok hello 5",
            "/pkg.Echo/Forget error PERMISSION_DENIED",
            "/pkg.Echo/Say ok hello 5",
        ],
        "{}",
        show(&out)
    );
    assert_eq!(
        *origin.served.lock().unwrap(),
        ["Say", "Say"],
        "the refused method reached the origin"
    );
    let denied = proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(denied["reason"], "path_not_allowed");
    assert_eq!(
        denied["url"],
        format!("https://secure.test:{}/pkg.Echo/Forget", origin.port)
    );
    let allowed = proxy
        .wait_audit(
            |r| r["event"] == "egress.allowed" && r["method"] == "POST",
            AUDIT_TIMEOUT,
        )
        .await;
    assert_eq!(
        allowed["url"],
        format!("https://secure.test:{}/pkg.Echo/Say", origin.port)
    );
}
