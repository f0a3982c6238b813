//! Connection settings parsed from a URL.
//!
//! Accepted forms (the query parameters below work with every form):
//!
//! | URL | deployment |
//! |---|---|
//! | `redis://[user[:password]@]host[:port][/db]` | one server |
//! | `rediss://…` | one server over TLS |
//! | `unix:///path/redis.sock[?db=N]` | one server over a unix socket |
//! | `redis+sentinel://[user[:password]@]host:port[,host:port…]/master[/db]` | Sentinel |
//! | `redis+cluster://[user[:password]@]host:port[,host:port…]` | Redis Cluster |
//!
//! `rediss+sentinel://` and `rediss+cluster://` use TLS to the data nodes.
//! Query parameters understood by ferrolock (all optional):
//! `connect_timeout` and `timeout` (seconds, float; defaults 3 and 3),
//! `tls_ca` (path of a PEM CA certificate to trust), `tls_insecure=1` (skip
//! certificate verification, tests only; TLS URLs only), `sentinel_username`
//! and `sentinel_password` (credentials of the sentinels themselves). On
//! single-server URLs other parameters are passed to the `redis` crate; on
//! Sentinel and Cluster URLs they are an error.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, TlsMode};

use crate::error::{Error, ErrorKind, Result};

/// The URL used when neither the caller nor `$REDIS_URL` names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/0";

/// Default time allowed to establish a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Default time allowed for Redis to answer one command.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);

/// `$REDIS_URL` if set and not empty, else [`DEFAULT_URL`].
pub fn default_url() -> String {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => DEFAULT_URL.to_owned(),
    }
}

/// The pieces of a connection given separately (legacy PHP `RedisFactory`
/// arrays: `['host' => …, 'port' => …, 'password' => …, 'database' => …]`).
#[derive(Debug, Clone, Default)]
pub struct UrlParts {
    /// Host name or IP; a path starting with `/` means a unix socket.
    pub host: Option<String>,
    /// TCP port (default 6379).
    pub port: Option<u16>,
    /// ACL user name.
    pub username: Option<String>,
    /// Password (AUTH).
    pub password: Option<String>,
    /// Database number.
    pub db: Option<i64>,
    /// Connect and command timeout, seconds.
    pub timeout: Option<f64>,
    /// Use TLS (`rediss://`).
    pub tls: bool,
}

impl UrlParts {
    /// The equivalent URL, with credentials percent-encoded.
    pub fn to_url(&self) -> Result<String> {
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        let db = self.db.unwrap_or(0);
        let mut query: Vec<(String, String)> = Vec::new();
        if let Some(t) = self.timeout {
            query.push(("connect_timeout".into(), t.to_string()));
            query.push(("timeout".into(), t.to_string()));
        }
        let mut url = if host.starts_with('/') {
            query.push(("db".into(), db.to_string()));
            if let Some(u) = &self.username {
                query.push(("user".into(), u.clone()));
            }
            if let Some(p) = &self.password {
                query.push(("pass".into(), p.clone()));
            }
            url::Url::parse(&format!("unix://{host}"))
        } else {
            let scheme = if self.tls { "rediss" } else { "redis" };
            let host = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_owned()
            };
            url::Url::parse(&format!(
                "{scheme}://{host}:{}/{db}",
                self.port.unwrap_or(6379)
            ))
        }
        .map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("invalid Redis host {host:?}: {e}"),
            )
        })?;
        if !host.starts_with('/') {
            if let Some(u) = &self.username {
                let _ = url.set_username(u);
            }
            if let Some(p) = &self.password {
                let _ = url.set_password(Some(p));
            }
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        Ok(url.into())
    }

    /// True when these parts say where the server is (host, port, password
    /// or database); otherwise they only adjust another URL ([`Self::apply_to`]).
    pub fn names_a_server(&self) -> bool {
        self.host.is_some() || self.port.is_some() || self.password.is_some() || self.db.is_some()
    }

    /// `base` with the settings of these parts that fit without naming a
    /// server: the timeout (connect and command; any URL form), the ACL user
    /// name and TLS (`redis://` becomes `rediss://`; single-server URLs). For
    /// arrays such as `['timeout' => 1]`: the default server, with these
    /// settings.
    pub fn apply_to(&self, base: &str) -> Result<String> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Config,
                format!("cannot apply connection settings to the default URL: {why}"),
            )
        };
        let mut out = base.trim().to_owned();
        if self.tls || self.username.is_some() {
            let mut url = url::Url::parse(&out).map_err(|e| bad(&e.to_string()))?;
            if !matches!(url.scheme(), "redis" | "rediss") {
                return Err(bad(&format!(
                    "a user name or TLS can only be added to redis:// URLs, not {}://; put it in the URL",
                    url.scheme()
                )));
            }
            if self.tls && url.scheme() == "redis" {
                url.set_scheme("rediss").map_err(|()| bad("TLS"))?;
            }
            if let Some(u) = &self.username {
                url.set_username(u)
                    .map_err(|()| bad("this URL has no user name"))?;
            }
            out = url.into();
        }
        if let Some(t) = self.timeout {
            // Textually: Sentinel and Cluster URLs list several hosts, which
            // a URL parser rejects.
            let (head, query) = out.split_once('?').unwrap_or((&out, ""));
            let mut q = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
                if k != "timeout" && k != "connect_timeout" {
                    q.append_pair(&k, &v);
                }
            }
            q.append_pair("connect_timeout", &t.to_string());
            q.append_pair("timeout", &t.to_string());
            out = format!("{head}?{}", q.finish());
        }
        Ok(out)
    }
}

/// Where Redis is and how to talk to it.
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) tls_certs: Option<redis::TlsCertificates>,
    redacted: String,
}

/// The deployment behind a [`Config`].
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// One server (TCP, TLS or unix socket).
    Single(ConnectionInfo),
    /// A master found through Sentinel.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
        node: RedisConnectionInfo,
        tls: Option<TlsMode>,
    },
    /// A Redis Cluster, reached through any of the seed nodes.
    Cluster {
        nodes: Vec<ConnectionInfo>,
        node: RedisConnectionInfo,
        tls: Option<TlsMode>,
    },
}

/// Settings extracted from the query string.
#[derive(Default)]
struct Params {
    connect_timeout: Option<Duration>,
    command_timeout: Option<Duration>,
    tls_ca: Option<String>,
    tls_insecure: bool,
    sentinel_username: Option<String>,
    sentinel_password: Option<String>,
    db: Option<i64>,
    /// Parameters ferrolock does not know, passed on to the redis crate.
    passthrough: Vec<(String, String)>,
}

impl Config {
    /// Parses a connection URL (see the module documentation for the forms).
    pub fn from_url(url: &str) -> Result<Self> {
        let url = url.trim();
        let bad = |why: &str| {
            Error::new(
                ErrorKind::Config,
                format!("invalid Redis URL {:?}: {why}", redact(url)),
            )
        };
        let (scheme, _) = url
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://…, e.g. redis://127.0.0.1:6379/0"))?;
        let scheme = scheme.to_ascii_lowercase();
        let mut config = match scheme.as_str() {
            "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" => {
                Self::single(url, &bad)?
            }
            "redis+sentinel" | "rediss+sentinel" => Self::multi(url, true, &bad)?,
            "redis+cluster" | "rediss+cluster" => Self::multi(url, false, &bad)?,
            other => {
                return Err(bad(&format!(
                    "unknown scheme {other:?} (use redis, rediss, unix, redis+sentinel or redis+cluster)"
                )));
            }
        };
        config.redacted = redact(url);
        Ok(config)
    }

    fn single(url: &str, bad: &dyn Fn(&str) -> Error) -> Result<Self> {
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let params = Params::parse(&parsed, bad)?;
        let mut rebuilt = parsed.clone();
        rebuilt.set_query(None);
        if !params.passthrough.is_empty() || params.db.is_some() {
            let mut query = rebuilt.query_pairs_mut();
            for (k, v) in &params.passthrough {
                query.append_pair(k, v);
            }
            if let Some(db) = params.db {
                query.append_pair("db", &db.to_string());
            }
        }
        let mut info = rebuilt
            .as_str()
            .into_connection_info()
            .map_err(|e| bad(&e.to_string()))?;
        if params.tls_insecure {
            info = match info.addr().clone() {
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    tls_params,
                    ..
                } => info.set_addr(ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: true,
                    tls_params,
                }),
                _ => return Err(bad("tls_insecure needs a rediss:// URL")),
            };
        }
        let tls_certs = params.tls_certs(bad)?;
        if tls_certs.is_some() && !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Err(bad("tls_ca needs a rediss:// URL"));
        }
        Ok(Self {
            target: Target::Single(info),
            connect_timeout: params.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            command_timeout: params.command_timeout.unwrap_or(DEFAULT_COMMAND_TIMEOUT),
            tls_certs,
            redacted: String::new(),
        })
    }

    /// `redis+sentinel://` and `redis+cluster://`: a comma-separated host list.
    fn multi(url: &str, sentinel: bool, bad: &dyn Fn(&str) -> Error) -> Result<Self> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let tls = scheme.to_ascii_lowercase().starts_with("rediss");
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        // Let the url crate decode credentials, path and query on a placeholder host.
        let placeholder = match userinfo {
            Some(u) => format!("redis://{u}@placeholder{tail}"),
            None => format!("redis://placeholder{tail}"),
        };
        let parsed = url::Url::parse(&placeholder).map_err(|e| bad(&e.to_string()))?;
        let params = Params::parse(&parsed, bad)?;
        // No redis crate URL parser sees these URLs: a parameter we do not
        // know would be silently ignored, so it is an error.
        if let Some((k, _)) = params.passthrough.first() {
            return Err(bad(&format!(
                "unknown parameter {k:?} (Sentinel and Cluster URLs take connect_timeout, timeout, \
                 tls_ca, tls_insecure, sentinel_username, sentinel_password)"
            )));
        }
        if params.tls_insecure && !tls {
            return Err(bad(
                "tls_insecure needs a rediss+sentinel:// or rediss+cluster:// URL",
            ));
        }
        let default_port = if sentinel { 26379 } else { 6379 };
        let mut addrs = Vec::new();
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            let hp = url::Url::parse(&format!("redis://{host}"))
                .map_err(|e| bad(&format!("bad host {host:?}: {e}")))?;
            let name = hp
                .host_str()
                .ok_or_else(|| bad(&format!("bad host {host:?}")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            addrs.push((name, hp.port().unwrap_or(default_port)));
        }
        if addrs.is_empty() {
            return Err(bad("no host given"));
        }
        let mut node = RedisConnectionInfo::default();
        if !parsed.username().is_empty() {
            node = node.set_username(decode(parsed.username()));
        }
        if let Some(p) = parsed.password() {
            node = node.set_password(decode(p));
        }
        let segments: Vec<String> = parsed
            .path_segments()
            .map(|s| s.filter(|x| !x.is_empty()).map(decode).collect())
            .unwrap_or_default();
        let tls_mode = if tls {
            Some(if params.tls_insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            })
        } else {
            None
        };
        let tls_certs = params.tls_certs(bad)?;
        let target = if sentinel {
            let master = segments.first().cloned().ok_or_else(|| {
                bad("the master name is missing: redis+sentinel://host:port/mymaster")
            })?;
            let db = match segments.get(1) {
                Some(s) => s.parse().map_err(|_| bad(&format!("bad database {s:?}")))?,
                None => params.db.unwrap_or(0),
            };
            node = node.set_db(db);
            let sentinels = addrs
                .into_iter()
                .map(|(h, p)| {
                    let mut r = RedisConnectionInfo::default();
                    if let Some(u) = &params.sentinel_username {
                        r = r.set_username(u);
                    }
                    if let Some(pw) = &params.sentinel_password {
                        r = r.set_password(pw);
                    }
                    (h, p)
                        .into_connection_info()
                        .map(|i| i.set_redis_settings(r))
                        .map_err(|e| bad(&e.to_string()))
                })
                .collect::<Result<Vec<_>>>()?;
            Target::Sentinel {
                sentinels,
                master,
                node,
                tls: tls_mode,
            }
        } else {
            if !segments.is_empty() && segments != ["0"] {
                return Err(bad("Redis Cluster has only database 0"));
            }
            let nodes = addrs
                .into_iter()
                .map(|(host, port)| {
                    node_info(&host, port, &node, tls_mode).map_err(|e| bad(&e.to_string()))
                })
                .collect::<Result<Vec<_>>>()?;
            Target::Cluster {
                nodes,
                node,
                tls: tls_mode,
            }
        };
        Ok(Self {
            target,
            connect_timeout: params.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            command_timeout: params.command_timeout.unwrap_or(DEFAULT_COMMAND_TIMEOUT),
            tls_certs,
            redacted: String::new(),
        })
    }

    /// Replaces the time allowed to establish a connection.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Replaces the time allowed for Redis to answer one command.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Time allowed to establish a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Time allowed for Redis to answer one command.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True for `redis+cluster://` URLs.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster { .. })
    }

    /// The URL with any password replaced by `***`, safe to log.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }
}

impl Params {
    fn parse(url: &url::Url, bad: &dyn Fn(&str) -> Error) -> Result<Self> {
        let mut p = Params::default();
        let seconds = |k: &str, v: &str| -> Result<Duration> {
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e6)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    bad(&format!(
                        "{k} must be a positive number of seconds, got {v:?}"
                    ))
                })
        };
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "connect_timeout" => p.connect_timeout = Some(seconds(&k, &v)?),
                "timeout" | "command_timeout" | "socket_timeout" => {
                    p.command_timeout = Some(seconds(&k, &v)?)
                }
                "tls_ca" => p.tls_ca = Some(v.into_owned()),
                "tls_insecure" => p.tls_insecure = matches!(v.as_ref(), "1" | "true" | "yes"),
                "sentinel_username" => p.sentinel_username = Some(v.into_owned()),
                "sentinel_password" => p.sentinel_password = Some(v.into_owned()),
                "db" => {
                    p.db = Some(
                        v.parse()
                            .map_err(|_| bad(&format!("db must be an integer, got {v:?}")))?,
                    )
                }
                _ => p.passthrough.push((k.into_owned(), v.into_owned())),
            }
        }
        Ok(p)
    }

    fn tls_certs(&self, bad: &dyn Fn(&str) -> Error) -> Result<Option<redis::TlsCertificates>> {
        let Some(path) = &self.tls_ca else {
            return Ok(None);
        };
        let pem =
            std::fs::read(path).map_err(|e| bad(&format!("cannot read tls_ca {path:?}: {e}")))?;
        Ok(Some(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        }))
    }
}

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

/// Replaces the password part of a URL by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let tail = redact_query(tail);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let shown = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{shown}@{hosts}{tail}")
        }
        None => format!("{scheme}://{authority}{tail}"),
    }
}

fn redact_query(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.contains("password") || k == "pass" => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&");
    format!("{path}?{query}")
}

/// The connection info of the node at `host:port` of a Sentinel or Cluster
/// deployment: its node settings (db, user, password) and TLS mode.
pub(crate) fn node_info(
    host: &str,
    port: u16,
    settings: &redis::RedisConnectionInfo,
    tls: Option<TlsMode>,
) -> redis::RedisResult<ConnectionInfo> {
    let addr = match tls {
        Some(mode) => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: mode == TlsMode::Insecure,
            tls_params: None,
        },
        None => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    Ok(addr
        .into_connection_info()?
        .set_redis_settings(settings.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_and_cluster_urls_reject_what_they_would_ignore() {
        for url in [
            "redis+sentinel://s1:26379/mymaster?protocol=resp3",
            "redis+cluster://n1:7000,n2:7001?tls_insecure=1",
        ] {
            let e = Config::from_url(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{url}: {e}");
        }
        assert!(Config::from_url("rediss+cluster://n1:7000?tls_insecure=1&timeout=2").is_ok());
    }

    #[test]
    fn parts_without_a_server_adjust_the_default_url() {
        let none = UrlParts::default();
        assert!(!none.names_a_server());
        assert_eq!(none.apply_to("redis://h:1/2").unwrap(), "redis://h:1/2");
        let p = UrlParts {
            timeout: Some(1.5),
            username: Some("app".into()),
            tls: true,
            ..UrlParts::default()
        };
        assert!(!p.names_a_server());
        let url = p
            .apply_to("redis://:pw@h:1/2?timeout=9&tls_insecure=1")
            .unwrap();
        assert_eq!(
            url,
            "rediss://app:pw@h:1/2?tls_insecure=1&connect_timeout=1.5&timeout=1.5"
        );
        let c = Config::from_url(&url).unwrap();
        assert_eq!(c.command_timeout(), Duration::from_millis(1500));
        let only_timeout = UrlParts {
            timeout: Some(0.25),
            ..UrlParts::default()
        };
        let sentinel = only_timeout
            .apply_to("redis+sentinel://s1:26379,s2:26379/mymaster/0")
            .unwrap();
        assert_eq!(
            Config::from_url(&sentinel).unwrap().command_timeout(),
            Duration::from_millis(250)
        );
        let tls_on_unix = UrlParts {
            tls: true,
            ..UrlParts::default()
        };
        assert!(tls_on_unix.apply_to("unix:///tmp/r.sock").is_err());
        assert!(
            UrlParts {
                host: Some("h".into()),
                ..UrlParts::default()
            }
            .names_a_server()
        );
    }

    #[test]
    fn single_url_with_timeouts() {
        let c = Config::from_url("redis://:secret@127.0.0.1:6390/2?timeout=0.5&connect_timeout=1")
            .unwrap();
        assert_eq!(c.command_timeout(), Duration::from_millis(500));
        assert_eq!(c.connect_timeout(), Duration::from_secs(1));
        assert_eq!(
            c.redacted_url(),
            "redis://:***@127.0.0.1:6390/2?timeout=0.5&connect_timeout=1"
        );
        match &c.target {
            Target::Single(info) => {
                assert_eq!(info.redis_settings().db(), 2);
                assert_eq!(info.redis_settings().password(), Some("secret"));
            }
            _ => panic!("expected a single server"),
        }
    }

    #[test]
    fn unix_and_tls() {
        let c = Config::from_url("unix:///tmp/r.sock?db=3").unwrap();
        match &c.target {
            Target::Single(info) => {
                assert!(matches!(info.addr(), ConnectionAddr::Unix(_)));
                assert_eq!(info.redis_settings().db(), 3);
            }
            _ => panic!("expected unix"),
        }
        let c = Config::from_url("rediss://u:p@localhost:6380/0?tls_insecure=1").unwrap();
        match &c.target {
            Target::Single(info) => assert!(matches!(
                info.addr(),
                ConnectionAddr::TcpTls { insecure: true, .. }
            )),
            _ => panic!("expected tls"),
        }
    }

    #[test]
    fn sentinel_and_cluster() {
        let c = Config::from_url("redis+sentinel://:pw@h1:26379,h2/mymaster/4").unwrap();
        match &c.target {
            Target::Sentinel {
                sentinels,
                master,
                node,
                ..
            } => {
                assert_eq!(sentinels.len(), 2);
                assert_eq!(master, "mymaster");
                assert_eq!(node.db(), 4);
                assert_eq!(node.password(), Some("pw"));
                assert!(matches!(sentinels[1].addr(), ConnectionAddr::Tcp(h, 26379) if h == "h2"));
            }
            _ => panic!("expected sentinel"),
        }
        let c = Config::from_url("redis+cluster://a:7000,b:7001,[::1]:7002").unwrap();
        assert!(c.is_cluster());
        match &c.target {
            Target::Cluster { nodes, .. } => {
                assert!(matches!(nodes[2].addr(), ConnectionAddr::Tcp(h, 7002) if h == "::1"))
            }
            _ => panic!("expected cluster"),
        }
    }

    #[test]
    fn url_from_parts() {
        let parts = UrlParts {
            host: Some("10.0.0.1".into()),
            port: Some(6380),
            password: Some("p@ss:w/rd".into()),
            db: Some(2),
            timeout: Some(1.5),
            ..UrlParts::default()
        };
        let url = parts.to_url().unwrap();
        let c = Config::from_url(&url).unwrap();
        match &c.target {
            Target::Single(info) => {
                assert_eq!(info.redis_settings().password(), Some("p@ss:w/rd"));
                assert_eq!(info.redis_settings().db(), 2);
            }
            _ => panic!("single"),
        }
        assert_eq!(c.command_timeout(), Duration::from_millis(1500));
        assert_eq!(
            UrlParts::default().to_url().unwrap(),
            "redis://127.0.0.1:6379/0"
        );
        let unix = UrlParts {
            host: Some("/tmp/r.sock".into()),
            ..UrlParts::default()
        };
        assert!(Config::from_url(&unix.to_url().unwrap()).is_ok());
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in [
            "",
            "127.0.0.1:6379",
            "http://x",
            "redis+sentinel://h1:1",
            "redis+cluster:///",
            "redis://h?timeout=-1",
            "redis://h?timeout=abc",
            "redis+cluster://h:1/3",
        ] {
            let err = Config::from_url(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{url}: {err}");
        }
    }
}
