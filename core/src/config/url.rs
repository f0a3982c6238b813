//! Reading a connection URL (the forms are listed in the module
//! documentation of `config`).

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, TlsMode};

use super::{Config, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Target, node_info};
use crate::error::{Error, ErrorKind, Result};

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
