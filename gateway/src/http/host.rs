//! The DNS-rebinding guard (catalogue AUTH-15). A web page whose domain an attacker re-points at
//! 127.0.0.1 reaches a server bound to loopback from the victim's browser, but its requests still
//! name the attacker's domain in `Host`. So a connection that arrived on a loopback address must
//! name a loopback host (`localhost`, `*.localhost`, a loopback IP) or one the operator listed in
//! `gateway.allowed_hosts` (a reverse proxy on the same machine that passes its own `Host`).
//! Connections on other addresses are reachable from the network anyway and are not checked.
//!
//! Before that, on every address, a request must name its host unambiguously (RFC 9112 §3.2):
//! exactly one `Host` on HTTP/1.1 (none is allowed on HTTP/1.0, which has no such header), and
//! an absolute-form target (`POST http://host/… HTTP/1.1`) whose authority is the `Host` it
//! sends, since the target's authority is what names the host then (§3.2.2). Anything else is a
//! `400`: which host did the client mean?

use std::net::IpAddr;

use agent_runtime::protocol::ProtocolError;
use axum::http::{HeaderMap, Uri, Version, header};

/// Whether a request may be served on a connection whose local address is `local`: `Err` is
/// the failure to answer (`400` for an ambiguous host, `421` for a host this address does not
/// serve).
pub fn check(
    version: Version,
    target: &Uri,
    headers: &HeaderMap,
    local: IpAddr,
    allowed_hosts: &[String],
) -> Result<(), ProtocolError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(ProtocolError::ambiguous_host());
    }
    if host.is_none() && version >= Version::HTTP_11 {
        return Err(ProtocolError::ambiguous_host());
    }
    let named = match (target.authority(), host) {
        (Some(authority), Some(host)) => {
            let same = host
                .to_str()
                .is_ok_and(|host| host.trim().eq_ignore_ascii_case(authority.as_str()));
            if !same {
                return Err(ProtocolError::ambiguous_host());
            }
            Some(authority.as_str())
        }
        (Some(authority), None) => Some(authority.as_str()),
        // A `Host` that is not even text names no host: refused on loopback like an empty one.
        (None, Some(host)) => Some(host.to_str().unwrap_or_default()),
        (None, None) => None,
    };
    if allowed(named, local, allowed_hosts) {
        Ok(())
    } else {
        Err(ProtocolError::host_not_allowed())
    }
}

/// Whether a request naming this host (`Host`, or the authority of its target) may be served on
/// a connection whose local address is `local`. An HTTP/1.0 request that names no host did not
/// come from a browser and is served.
fn allowed(host: Option<&str>, local: IpAddr, allowed_hosts: &[String]) -> bool {
    if !local.is_loopback() {
        return true;
    }
    let Some(host) = host else {
        return true;
    };
    let Some(name) = host_name(host) else {
        return false;
    };
    is_loopback_name(&name)
        || allowed_hosts
            .iter()
            .any(|allowed| allowed == "*" || allowed.eq_ignore_ascii_case(&name))
}

/// The host of a `Host` value without its port, lowercased, IPv6 without brackets.
fn host_name(value: &str) -> Option<String> {
    let value = value.trim();
    let name = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        inside
    } else {
        match value.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return None,
            None => value,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn check(host: &str, allowed_hosts: &[&str]) -> bool {
        let allowed_hosts: Vec<String> = allowed_hosts.iter().map(|h| h.to_string()).collect();
        allowed(Some(host), LOOPBACK, &allowed_hosts)
    }

    fn request(version: Version, target: &str, hosts: &[&str]) -> Result<(), u16> {
        let mut headers = HeaderMap::new();
        for host in hosts {
            headers.append(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        super::check(version, &target.parse().unwrap(), &headers, LOOPBACK, &[])
            .map_err(|error| error.http_status())
    }

    #[test]
    fn the_host_must_be_named_once_and_the_target_must_agree_with_it() {
        let v11 = Version::HTTP_11;
        assert_eq!(request(v11, "/", &["localhost:1"]), Ok(()));
        assert_eq!(request(v11, "/", &[]), Err(400));
        assert_eq!(request(v11, "/", &["localhost", "localhost"]), Err(400));
        assert_eq!(request(v11, "/", &["localhost", "evil.example"]), Err(400));
        assert_eq!(
            request(v11, "http://LocalHost:1/", &["localhost:1"]),
            Ok(())
        );
        assert_eq!(
            request(v11, "http://evil.example/", &["localhost:1"]),
            Err(400)
        );
        assert_eq!(
            request(v11, "http://localhost/", &["localhost:1"]),
            Err(400)
        );
        assert_eq!(
            request(v11, "http://evil.example/", &["evil.example"]),
            Err(421)
        );
        assert_eq!(request(v11, "http://localhost/", &[]), Err(400));
        let v10 = Version::HTTP_10;
        assert_eq!(request(v10, "/", &[]), Ok(()));
        assert_eq!(request(v10, "http://localhost:1/", &[]), Ok(()));
        assert_eq!(request(v10, "http://evil.example/", &[]), Err(421));
    }

    #[test]
    fn loopback_names_pass_and_foreign_names_do_not() {
        for host in [
            "localhost",
            "LOCALHOST:8787",
            "localhost.",
            "console.localhost:1",
            "127.0.0.1:8787",
            "127.1.2.3",
            "[::1]:8787",
            "[::1]",
        ] {
            assert!(check(host, &[]), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8787",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "10.0.0.1",
            "[::2]:80",
            "[::1]x",
            "localhost:port",
            "",
            ":8787",
        ] {
            assert!(!check(host, &[]), "{host}");
        }
    }

    #[test]
    fn listed_hosts_pass_and_a_star_passes_everything() {
        assert!(check("Agents.Example.com:443", &["agents.example.com"]));
        assert!(!check("other.example.com", &["agents.example.com"]));
        assert!(check("anything.example", &["*"]));
    }

    #[test]
    fn connections_on_other_addresses_are_not_checked() {
        let public: IpAddr = "192.0.2.10".parse().unwrap();
        assert!(allowed(Some("evil.example"), public, &[]));
        assert!(allowed(None, LOOPBACK, &[]));
    }
}
