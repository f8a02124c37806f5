//! A TCP proxy between an engine and PostgreSQL, for tests that must control what the network does
//! at an exact moment: new connections can be passed through, closed at once (the connect fails),
//! or held unanswered (the connect hangs) until the test lets them through; and a `LISTEN`
//! statement on its way to the server can be cut off with its connection, or held. Arrivals are
//! counted, so a test can wait until a reconnect is actually under way instead of sleeping.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

/// What the proxy does with the next new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Forward it to PostgreSQL.
    Pass,
    /// Close it at once: the client's connect fails with an I/O error.
    Close,
    /// Accept it and forward nothing until [`Proxy::release`].
    Hold,
}

#[derive(Default)]
struct Counts {
    closed: usize,
    held: usize,
}

struct State {
    /// Behaviours for the next arrivals, in order; when empty, `otherwise`.
    next: Mutex<VecDeque<Arrival>>,
    /// Behaviours for the next `LISTEN` statements, in order; when empty, they pass.
    listens: Mutex<VecDeque<Arrival>>,
    otherwise: Mutex<Arrival>,
    counts: Mutex<Counts>,
    arrived: Notify,
    released: watch::Sender<u64>,
}

pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            next: Mutex::new(VecDeque::new()),
            listens: Mutex::new(VecDeque::new()),
            otherwise: Mutex::new(Arrival::Pass),
            counts: Mutex::new(Counts::default()),
            arrived: Notify::new(),
            released: watch::channel(0).0,
        });
        let s = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let what = {
                    let queued = s.next.lock().unwrap().pop_front();
                    queued.unwrap_or(*s.otherwise.lock().unwrap())
                };
                match what {
                    Arrival::Pass => {
                        tokio::spawn(forward(client, upstream, s.clone()));
                    }
                    Arrival::Close => {
                        s.counts.lock().unwrap().closed += 1;
                        drop(client);
                    }
                    Arrival::Hold => {
                        s.counts.lock().unwrap().held += 1;
                        let s = s.clone();
                        let generation = *s.released.borrow();
                        tokio::spawn(async move {
                            s.until_released(generation).await;
                            forward(client, upstream, s).await;
                        });
                    }
                }
                s.arrived.notify_waiters();
            }
        });
        Proxy { port, state }
    }

    /// The next arrivals get these behaviours, in order; later ones get `then`.
    pub fn script(&self, first: &[Arrival], then: Arrival) {
        *self.state.next.lock().unwrap() = first.iter().copied().collect();
        *self.state.otherwise.lock().unwrap() = then;
    }

    /// The next `LISTEN` statements sent through the proxy get these behaviours, in order: `Close`
    /// cuts the connection it travels on, `Hold` keeps it (and the connection) until
    /// [`Proxy::release`]. Later ones pass.
    pub fn script_listens(&self, first: &[Arrival]) {
        *self.state.listens.lock().unwrap() = first.iter().copied().collect();
    }

    /// Lets every held connection and statement through; new arrivals pass again.
    pub fn release(&self) {
        self.state.next.lock().unwrap().clear();
        self.state.listens.lock().unwrap().clear();
        *self.state.otherwise.lock().unwrap() = Arrival::Pass;
        self.state.released.send_modify(|g| *g += 1);
    }

    /// Waits until at least `closed` connections were closed and `held` are being held.
    pub async fn wait_for(&self, closed: usize, held: usize, timeout: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.state.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let c = self.state.counts.lock().unwrap();
                if c.closed >= closed && c.held >= held {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let c = self.state.counts.lock().unwrap();
                panic!(
                    "the proxy saw {} closed and {} held connections, waiting for {closed} and {held}",
                    c.closed, c.held
                );
            }
        }
    }
}

impl State {
    /// Returns once [`Proxy::release`] was called since `generation` was read.
    async fn until_released(&self, generation: u64) {
        let mut released = self.released.subscribe();
        while *released.borrow_and_update() == generation {
            if released.changed().await.is_err() {
                return;
            }
        }
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, state: Arc<State>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let to_client = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    });
    // Client to server by hand, to see the statements go by. A simple query is one small
    // message, which arrives in one read.
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if buf[..n].windows(8).any(|w| w == b"LISTEN \"") {
            let what = state.listens.lock().unwrap().pop_front();
            match what {
                Some(Arrival::Close) => {
                    state.counts.lock().unwrap().closed += 1;
                    state.arrived.notify_waiters();
                    break;
                }
                Some(Arrival::Hold) => {
                    let generation = *state.released.borrow();
                    state.counts.lock().unwrap().held += 1;
                    state.arrived.notify_waiters();
                    state.until_released(generation).await;
                }
                Some(Arrival::Pass) | None => {}
            }
        }
        if server_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    to_client.abort();
}
