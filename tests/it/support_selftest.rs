//! The harness checks itself, so a failing proxy test points at the proxy.

use std::net::Ipv4Addr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UdpSocket};

use crate::support::client::{https_get, send_raw, Conn};
use crate::support::dns::DnsServer;
use crate::support::org::Org;
use crate::support::origin::{HttpsOrigin, Origin};
use crate::support::proxy::parse_listening;

#[tokio::test]
async fn origin_answers_a_direct_request_and_records_it() {
    let origin = Origin::start_named("a").await;
    let resp = send_raw(
        origin.addr(),
        b"POST /x?y=1 HTTP/1.1\r\nHost: a\r\nX-Dup: 1\r\nx-dup: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    )
    .await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.text(), "origin:a");
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].target, "/x?y=1");
    assert_eq!(reqs[0].header_all("x-dup"), vec!["1", "2"]);
    assert_eq!(reqs[0].body, b"abc");
    assert_eq!(origin.connections(), 1);
}

#[tokio::test]
async fn origin_keeps_the_connection_alive_and_decodes_chunks() {
    let origin = Origin::start().await;
    let mut conn = Conn::open(origin.addr()).await;
    conn.send(b"GET /1 HTTP/1.1\r\nHost: o\r\n\r\n").await;
    assert_eq!(conn.read_response().await.text(), "origin:origin");
    conn.send(b"POST /2 HTTP/1.1\r\nHost: o\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        .await;
    assert_eq!(conn.read_response().await.status, 200);
    assert_eq!(origin.hits(), 2);
    assert_eq!(origin.connections(), 1);
    assert_eq!(origin.requests()[1].body, b"abcde");
}

#[tokio::test]
async fn client_reads_chunked_and_until_eof_bodies() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for answer in [
            &b"HTTP/1.1 403 Forbidden\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n"[..],
            &b"HTTP/1.1 400 Bad Request\r\n\r\nuntil eof"[..],
        ] {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            s.write_all(answer).await.unwrap();
            s.shutdown().await.unwrap();
        }
    });
    let resp = send_raw(addr, b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(resp.status, 403);
    assert_eq!(resp.header("X-A"), Some("1"));
    assert_eq!(resp.json()["a"], 1);
    let resp = send_raw(addr, b"GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!((resp.status, resp.text().as_str()), (400, "until eof"));
}

#[tokio::test]
async fn https_origin_handshakes_directly() {
    let origin = HttpsOrigin::start().await;
    let stream = tokio::net::TcpStream::connect(origin.addr()).await.unwrap();
    let resp = https_get(stream, origin.cert_der(), "/tls").await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.text(), origin.body());
    assert_eq!(origin.connections(), 1);
    assert_eq!(origin.requests()[0].target, "/tls");
}

async fn ask(server: std::net::SocketAddr, name: &str, rtype: RecordType) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut query = Message::new();
    query
        .set_id(4242)
        .set_message_type(MessageType::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    socket
        .send_to(&query.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(Duration::from_secs(3), socket.recv_from(&mut buf))
        .await
        .expect("dns answer in time")
        .unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

#[tokio::test]
async fn dns_server_answers_known_names_and_nxdomain_for_others() {
    let dns = DnsServer::builder()
        .record("allowed.test", Ipv4Addr::new(127, 0, 0, 1))
        .start()
        .await;
    let answer = ask(dns.addr(), "allowed.test.", RecordType::A).await;
    assert_eq!(answer.id(), 4242);
    assert_eq!(answer.message_type(), MessageType::Response);
    assert_eq!(answer.response_code(), ResponseCode::NoError);
    assert_eq!(answer.answers().len(), 1);
    assert_eq!(
        answer.answers()[0].data(),
        &RData::A(Ipv4Addr::new(127, 0, 0, 1).into())
    );

    let aaaa = ask(dns.addr(), "Allowed.Test.", RecordType::AAAA).await;
    assert_eq!(aaaa.response_code(), ResponseCode::NoError);
    assert!(aaaa.answers().is_empty());

    let unknown = ask(dns.addr(), "ghost.test.", RecordType::A).await;
    assert_eq!(unknown.response_code(), ResponseCode::NXDomain);

    assert_eq!(dns.queries_for("allowed.test"), 2);
    assert_eq!(dns.queries_for("ghost.test"), 1);
    assert_eq!(dns.queries_for("evil.test"), 0);
}

#[test]
fn org_builder_renders_valid_toml() {
    let text = Org::standard(8080)
        .deny("bad.allowed.test")
        .mode("report")
        .default_policy(r#"{ type = "allowlist", allowed_domains = ["allowed.test"] }"#)
        .shared_hosting("deny")
        .to_toml();
    let value: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(value["version"].as_integer(), Some(1));
    assert_eq!(value["allowed_ports"].as_array().unwrap().len(), 3);
    assert_eq!(value["shared_hosting"]["action"].as_str(), Some("deny"));
    assert_eq!(
        value["default_network_policy"]["type"].as_str(),
        Some("allowlist")
    );
}

#[test]
fn listening_line_is_found_in_log_formats() {
    let want = "127.0.0.1:4567".parse().unwrap();
    for line in [
        "listening on 127.0.0.1:4567\n",
        "2024-01-01T00:00:00Z  INFO egress_proxy: listening on 127.0.0.1:4567 admin=none",
        "INFO listening on \"127.0.0.1:4567\"",
    ] {
        assert_eq!(parse_listening(line), Some(want), "{line}");
    }
    assert_eq!(parse_listening("starting"), None);
}
