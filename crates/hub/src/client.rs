//! A minimal HTTP/1.1 client over one keep-alive connection: what the integration tests and
//! the ingest benchmark need to talk to a hub on loopback, without a full HTTP client crate.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A response.
#[derive(Clone, Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One connection to `addr`, reopened when the server closed it.
#[derive(Debug)]
pub struct Client {
    addr: SocketAddr,
    stream: Option<BufReader<TcpStream>>,
}

impl Client {
    /// A client for `addr` (connects on first use).
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr, stream: None }
    }

    /// Sends a request and reads the response.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Response> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        let reused = self.stream.is_some();
        match self.exchange(&out).await {
            // The server closed the kept-alive connection before reading the request (it
            // does so after answering a request whose body it refused): once more, afresh.
            Err(e) if reused && closed_before_answering(&e) => self.exchange(&out).await,
            result => result,
        }
    }

    /// Writes `request` on the connection (opened if needed) and reads the response.
    async fn exchange(&mut self, request: &[u8]) -> io::Result<Response> {
        let stream = match &mut self.stream {
            Some(s) => s,
            None => self
                .stream
                .insert(BufReader::new(TcpStream::connect(self.addr).await?)),
        };
        let sent = stream.get_mut().write_all(request).await;
        let response = match sent {
            Ok(()) => read_response(stream).await,
            Err(e) => Err(e),
        };
        match response {
            Ok(r) => {
                if r.header("connection") == Some("close") {
                    self.stream = None;
                }
                Ok(r)
            }
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }

    /// `GET path` with optional headers.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
        self.request("GET", path, headers, b"").await
    }

    /// `POST path` with a body.
    pub async fn post(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> io::Result<Response> {
        self.request("POST", path, headers, body).await
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Whether `e` says the connection was closed under the request (nothing was answered).
fn closed_before_answering(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
    )
}

async fn read_response(stream: &mut BufReader<TcpStream>) -> io::Result<Response> {
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        stream.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let find = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if let Some(len) = find("content-length") {
        let len: usize = len.parse().map_err(|_| invalid("bad content-length"))?;
        body.resize(len, 0);
        stream.read_exact(&mut body).await?;
    } else if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            line.clear();
            stream.read_line(&mut line).await?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|_| invalid("bad chunk size"))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if status != 204 && status != 304 {
        stream.read_to_end(&mut body).await?;
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}
