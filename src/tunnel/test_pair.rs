//! A connected pair of TCP streams on loopback, for the relay's and the splice's tests.

use tokio::net::{TcpListener, TcpStream};

/// Two ends of one loopback connection.
pub(super) async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let near = TcpStream::connect(listener.local_addr().unwrap());
    let (near, far) = tokio::join!(near, listener.accept());
    (near.unwrap(), far.unwrap().0)
}
