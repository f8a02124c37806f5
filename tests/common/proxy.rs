//! A TCP proxy between an engine and PostgreSQL, for tests that must control what the network does
//! at an exact moment: new connections can be passed through, closed at once (the connect fails),
//! or held unanswered (the connect hangs) until the test lets them through. Arrivals are counted,
//! so a test can wait until a reconnect attempt is actually under way instead of sleeping.

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
                        tokio::spawn(forward(client, upstream));
                    }
                    Arrival::Close => {
                        s.counts.lock().unwrap().closed += 1;
                        drop(client);
                    }
                    Arrival::Hold => {
                        s.counts.lock().unwrap().held += 1;
                        let mut released = s.released.subscribe();
                        let generation = *released.borrow();
                        tokio::spawn(async move {
                            while *released.borrow_and_update() == generation {
                                if released.changed().await.is_err() {
                                    return;
                                }
                            }
                            forward(client, upstream).await;
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

    /// Lets every held connection through; new arrivals pass again.
    pub fn release(&self) {
        self.state.next.lock().unwrap().clear();
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

async fn forward(mut client: TcpStream, upstream: SocketAddr) {
    if let Ok(mut server) = TcpStream::connect(upstream).await {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
    }
}
