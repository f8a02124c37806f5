//! The database's address, as a failover moves it: a TCP proxy on a port of its own that passes
//! every connection to the current primary, until [`Switch::point_at`] names another. Moving
//! the address cuts every connection open through it, as a virtual IP moving to another machine
//! (or a DNS change followed by the old primary's death) does: the clients see their connections
//! fail and connect again, to the new primary.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running switch; it stops when dropped.
pub struct Switch {
    addr: SocketAddr,
    state: Arc<Mutex<Target>>,
    stop: CancellationToken,
}

struct Target {
    upstream: SocketAddr,
    /// Cancelled when the address moves: ends every connection made to the old upstream.
    moved: CancellationToken,
}

impl Switch {
    /// Listens on a free loopback port, passing connections to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Switch> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(Target {
            upstream,
            moved: CancellationToken::new(),
        }));
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, state.clone(), stop.clone()));
        Ok(Switch { addr, state, stop })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Moves the address to `upstream`: every connection open through the switch is cut, and
    /// new ones go there.
    pub fn point_at(&self, upstream: SocketAddr) {
        let mut target = self.state.lock().expect("switch state poisoned");
        target.moved.cancel();
        *target = Target {
            upstream,
            moved: CancellationToken::new(),
        };
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop.cancel();
        self.state
            .lock()
            .expect("switch state poisoned")
            .moved
            .cancel();
    }
}

async fn accept(listener: TcpListener, state: Arc<Mutex<Target>>, stop: CancellationToken) {
    loop {
        let client = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => continue,
            },
        };
        let (upstream, moved) = {
            let target = state.lock().expect("switch state poisoned");
            (target.upstream, target.moved.clone())
        };
        tokio::spawn(pass(client, upstream, moved));
    }
}

/// Passes one connection on until either side closes it or the address moves.
async fn pass(mut client: TcpStream, upstream: SocketAddr, moved: CancellationToken) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        // The upstream is down (a killed primary): the client's connection fails.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = moved.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}
