//! A TCP proxy between the client and a test server, for network faults a
//! paused server cannot make: a network that holds packets back and
//! delivers them late, and a connection that dies after its command was
//! delivered, before the reply.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A TCP proxy on a free loopback port, forwarding to `127.0.0.1:<target>`
/// (one thread per direction of each connection). Stopped on drop.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Connections opened so far (each gets the next number).
    opened: u64,
    /// Connections numbered below this are stalled (see [`Proxy::stall`]).
    stalled_below: u64,
    /// Replies to drop, with their connection (see [`Proxy::cut_replies`]).
    cut_replies: u32,
}

impl Proxy {
    /// A proxy to the server listening on `target` (loopback).
    pub fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let port = listener.local_addr().expect("proxy address").port();
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || accept(&listener, target, &accepting));
        Self { port, shared }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0` plus `query` (e.g. `"?timeout=1"`).
    pub fn url_with(&self, query: &str) -> String {
        format!("redis://127.0.0.1:{}/0{query}", self.port)
    }

    /// Holds back everything on the connections open now, both ways: what
    /// the client sends meanwhile is delivered to the server at
    /// [`Proxy::resume`], even if the client has closed (reset) the
    /// connection by then — a command delayed in the network. Connections
    /// opened later pass.
    pub fn stall(&self) {
        let mut st = self.shared.state.lock().expect("proxy state");
        st.stalled_below = st.opened;
    }

    /// Delivers what [`Proxy::stall`] held back, and goes on forwarding.
    pub fn resume(&self) {
        self.shared.state.lock().expect("proxy state").stalled_below = 0;
        self.shared.changed.notify_all();
    }

    /// The next `n` replies the server sends (on any connection) are
    /// dropped, and their connection reset: the command ran, the client
    /// learns nothing of it.
    pub fn cut_replies(&self, n: u32) {
        self.shared.state.lock().expect("proxy state").cut_replies = n;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.changed.notify_all();
    }
}

fn accept(listener: &TcpListener, target: u16, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => return,
        };
        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
            continue; // the client sees its connection closed
        };
        let _ = client.set_nonblocking(false);
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let number = {
            let mut st = shared.state.lock().expect("proxy state");
            st.opened += 1;
            st.opened
        };
        for (from, to, replies) in [
            (client.try_clone(), server.try_clone(), false),
            (server.try_clone(), client.try_clone(), true),
        ] {
            let (Ok(from), Ok(to)) = (from, to) else {
                continue;
            };
            let shared = Arc::clone(shared);
            std::thread::spawn(move || pump(from, to, number, replies, &shared));
        }
    }
}

/// Forwards `from` to `to` until either side closes or the proxy stops.
/// `replies`: this is the server-to-client direction.
fn pump(mut from: TcpStream, mut to: TcpStream, number: u64, replies: bool, shared: &Shared) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // Hold the chunk while this connection is stalled.
        let mut st = shared.state.lock().expect("proxy state");
        while number <= st.stalled_below && !shared.stop.load(Ordering::Acquire) {
            st = shared.changed.wait(st).expect("proxy state");
        }
        if replies && st.cut_replies > 0 {
            st.cut_replies -= 1;
            drop(st);
            // Close both sides: the client's read fails at once.
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
        drop(st);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
