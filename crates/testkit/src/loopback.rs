//! What every stand-in server of the testkit shares: an axum app served on a free loopback
//! port, and failures on demand ("the next N requests METHOD …SUFFIX get an error").

use axum::Router;

/// Serves `app` on a free port of 127.0.0.1 on `runtime` until the runtime stops: the port.
pub fn serve(runtime: &tokio::runtime::Handle, app: Router) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let _context = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// Requests to fail: (method, path suffix, how many more times).
#[derive(Debug, Default)]
pub struct Failures(Vec<(String, String, u32)>);

impl Failures {
    /// The next `times` requests `method` to a path ending with `suffix` fail.
    pub fn add(&mut self, method: &str, suffix: &str, times: u32) {
        self.0.push((method.into(), suffix.into(), times));
    }

    /// No more failures.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Whether this request (`method` to `path`) is one to fail; counts it.
    pub fn take(&mut self, method: &str, path: &str) -> bool {
        match self
            .0
            .iter_mut()
            .find(|(m, s, n)| *n > 0 && m == method && path.ends_with(s.as_str()))
        {
            Some(rule) => {
                rule.2 -= 1;
                true
            }
            None => false,
        }
    }
}
