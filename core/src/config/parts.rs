//! A connection given piece by piece (legacy PHP `RedisFactory` arrays), as a URL.

use crate::error::{Error, ErrorKind, Result};

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

    /// `base` with the settings of these parts other than host and port: the
    /// timeout (connect and command; any URL form), the ACL user name and TLS
    /// (`redis://` becomes `rediss://`), the password and the database
    /// (single-server URLs). For arrays such as `['timeout' => 1]` (the
    /// default server, with these settings) and `['url' => …, 'database' =>
    /// 3]`. A password or database that the URL already gives differently is
    /// an [`ErrorKind::Config`] error naming both: never another server or
    /// database than the caller named.
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
        if self.password.is_some() || self.db.is_some() {
            out = self.apply_password_and_db(&out)?;
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

impl UrlParts {
    /// The password and database of these parts put into `base` (see
    /// [`UrlParts::apply_to`]).
    fn apply_password_and_db(&self, base: &str) -> Result<String> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::Config,
                format!("cannot apply connection settings to the URL: {why}"),
            )
        };
        let mut url = url::Url::parse(base).map_err(|e| bad(e.to_string()))?;
        let scheme = url.scheme().to_ascii_lowercase();
        let unix = matches!(scheme.as_str(), "unix" | "redis+unix");
        if !unix && !matches!(scheme.as_str(), "redis" | "rediss" | "valkey" | "valkeys") {
            return Err(bad(format!(
                "'password' and 'database' can only be added to a single-server URL, not {scheme}://; put them in the URL"
            )));
        }
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let query = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let mut add_query: Vec<(&str, String)> = Vec::new();
        if let Some(db) = self.db {
            let path_db = if unix {
                None
            } else {
                url.path_segments()
                    .and_then(|mut s| s.next())
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            match path_db.or_else(|| query("db")) {
                Some(given) if given.trim().parse::<i64>() != Ok(db) => {
                    return Err(bad(format!(
                        "'database' => {db} differs from the URL's database {given:?}"
                    )));
                }
                Some(_) => {}
                None if unix => add_query.push(("db", db.to_string())),
                None => url.set_path(&format!("/{db}")),
            }
        }
        if let Some(password) = &self.password {
            let differs = "'password' differs from the URL's password".to_owned();
            if unix {
                match query("pass").or_else(|| query("password")) {
                    Some(given) if given != *password => return Err(bad(differs)),
                    Some(_) => {}
                    None => add_query.push(("pass", password.clone())),
                }
            } else if url.password().is_some() {
                // Compared as the URL encodes them.
                let mut ours = url.clone();
                ours.set_password(Some(password))
                    .map_err(|()| bad("this URL cannot carry a password".into()))?;
                if ours.password() != url.password() {
                    return Err(bad(differs));
                }
            } else {
                url.set_password(Some(password))
                    .map_err(|()| bad("this URL cannot carry a password".into()))?;
            }
        }
        if !add_query.is_empty() {
            url.query_pairs_mut().extend_pairs(add_query);
        }
        Ok(url.into())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Config, Target};

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
    fn password_and_database_apply_to_a_url_or_are_refused() {
        let parts = UrlParts {
            password: Some("p@ss".into()),
            db: Some(3),
            timeout: Some(1.0),
            ..UrlParts::default()
        };
        let url = parts.apply_to("redis://127.0.0.1:6390").unwrap();
        let c = Config::from_url(&url).unwrap();
        match &c.target {
            Target::Single(info) => {
                assert_eq!(info.redis_settings().password(), Some("p@ss"));
                assert_eq!(info.redis_settings().db(), 3);
            }
            _ => panic!("single"),
        }
        assert_eq!(c.command_timeout(), Duration::from_secs(1));
        // The same values twice are fine; different ones are refused, named.
        assert!(parts.apply_to("redis://:p%40ss@h:1/3").is_ok());
        let e = parts.apply_to("redis://h:1/2").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.message().contains("'database' => 3") && e.message().contains("\"2\""));
        let e = parts.apply_to("redis://:other@h:1").unwrap_err();
        assert!(e.message().contains("'password' differs"), "{e}");
        let unix = parts.apply_to("unix:///tmp/r.sock").unwrap();
        match &Config::from_url(&unix).unwrap().target {
            Target::Single(info) => {
                assert_eq!(info.redis_settings().db(), 3);
                assert_eq!(info.redis_settings().password(), Some("p@ss"));
            }
            _ => panic!("unix"),
        }
        assert!(parts.apply_to("unix:///tmp/r.sock?db=4").is_err());
        let e = parts
            .apply_to("redis+sentinel://s1:26379/mymaster")
            .unwrap_err();
        assert!(e.message().contains("single-server"), "{e}");
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
}
