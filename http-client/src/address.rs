//! Where a request to an address a user or an operator named may go (server-side request
//! forgery defence, shared by WebFetch, MCP over HTTP and webhook deliveries): unless the caller
//! exempts the target, every address the host name resolves to must be a global one (not
//! loopback, private, link-local, CGNAT, documentation, multicast, …); cloud metadata endpoints
//! (169.254.0.0/16, `fd00:ec2::254`, `100.100.100.200`, `metadata.google.internal`, …) are
//! refused always, exemption or not, since they hand out the host's credentials. The check runs
//! after resolution and the connection is pinned to the vetted address ([`pinned_client`]), so
//! a second DNS answer cannot swap in `127.0.0.1`; redirects are not followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use async_trait::async_trait;
use reqwest::Url;

/// Host-name resolution: the system's, or a test's.
#[async_trait]
pub trait HostResolver: Send + Sync + std::fmt::Debug {
    async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Debug)]
pub struct SystemResolver;

#[async_trait]
impl HostResolver for SystemResolver {
    async fn lookup(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

/// An HTTP client for `url`'s host that connects only to the vetted `address` and follows no
/// redirect (each hop must be vetted again by the caller).
pub fn pinned_client(url: &Url, address: SocketAddr) -> reqwest::ClientBuilder {
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    crate::builder()
        .redirect(reqwest::redirect::Policy::none())
        .resolve(host, address)
}

/// Host names of cloud metadata services.
const METADATA_HOSTS: [&str; 5] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// Whether an address is a cloud metadata endpoint (or anywhere in IPv4 link-local, where
/// they live): refused even where private addresses are allowed.
pub fn is_metadata_address(ip: IpAddr) -> bool {
    let v4 = match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped().or_else(|| {
            let s = v6.segments();
            (s[0] == 0x64 && s[1] == 0xff9b).then(|| {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                Ipv4Addr::new(a, b, c, d)
            })
        }),
    };
    match (ip, v4) {
        (_, Some(v4)) => v4.is_link_local() || v4 == Ipv4Addr::new(100, 100, 100, 200),
        (IpAddr::V6(v6), None) => v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        (IpAddr::V4(_), None) => false,
    }
}

/// Whether a URL host names a metadata service; trailing dots and case do not hide it.
pub fn is_metadata_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    METADATA_HOSTS.contains(&host.as_str())
}

/// Whether an address is one the public internet routes to.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_global_v4(v4);
            }
            let s = v6.segments();
            let embedded_v4 = s[0] == 0x64 && s[1] == 0xff9b; // NAT64 64:ff9b::/96
            if embedded_v4 {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return is_global_v4(Ipv4Addr::new(a, b, c, d));
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || s[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible and other ::/96
        }
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_unspecified()
        || ip.is_multicast()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 192 && b == 0 && c == 0)) // IETF protocol assignments
}

/// Why an address was refused.
#[derive(Debug)]
pub enum Refusal {
    /// The host has no address now (DNS): may change.
    Unresolved(String),
    /// A loopback or private address without the exemption.
    Private(String),
    /// A cloud metadata address: never allowed.
    Forbidden(String),
}

impl Refusal {
    pub fn into_message(self) -> String {
        match self {
            Self::Unresolved(why) | Self::Private(why) | Self::Forbidden(why) => why,
        }
    }
}

/// The address to connect to for `url`, after the address rules; `exempt` lifts the rule on
/// private addresses (never the one on metadata endpoints). `action` ends the refusal's message
/// ("fetching it" is refused).
pub async fn vet(
    resolver: &dyn HostResolver,
    url: &Url,
    exempt: bool,
    action: &str,
) -> Result<SocketAddr, Refusal> {
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let port = url.port_or_known_default().unwrap_or(80);
    if is_metadata_host(host) {
        return Err(Refusal::Forbidden(format!(
            "{host} is a cloud metadata endpoint; {action} is refused"
        )));
    }
    let addresses: Vec<SocketAddr> = resolver
        .lookup(host, port)
        .await
        .map_err(|e| Refusal::Unresolved(format!("cannot resolve {host}: {e}")))?;
    let first = *addresses
        .first()
        .ok_or_else(|| Refusal::Unresolved(format!("{host} has no address")))?;
    if let Some(bad) = addresses.iter().find(|a| is_metadata_address(a.ip())) {
        return Err(Refusal::Forbidden(format!(
            "{host} resolves to the cloud metadata address {}; {action} is refused",
            bad.ip()
        )));
    }
    if !exempt && let Some(bad) = addresses.iter().find(|a| !is_global(a.ip())) {
        return Err(Refusal::Private(format!(
            "{host} resolves to the non-public address {}; {action} is refused",
            bad.ip()
        )));
    }
    Ok(first)
}
