//! Where deliveries may go. Unless `webhooks.allow_private_targets`, a target that is, or
//! resolves to, a loopback, private, link-local, shared, multicast or unspecified address is
//! refused: a webhook is not a way into the daemon's own network. The check runs on the
//! addresses the connection will use (a resolver that filters them), so a name that resolves
//! elsewhere later (DNS rebinding) gains nothing; redirects are not followed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// True for an address outside the public internet.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                // 100.64.0.0/10, shared address space (carrier-grade NAT).
                || (a == 100 && (64..128).contains(&b))
                // 198.18.0.0/15, benchmarking.
                || (a == 198 && (b == 18 || b == 19))
                || a >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // fc00::/7 unique local, fe80::/10 link-local.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
        }
    }
}

/// Why `url` may not be a target, checked without resolving it: not http(s), no host, or a
/// literal private address (or `localhost`) while those are refused. The URL parser writes every
/// form of an address literal out as the address it is (`127.1`, `2130706433`, `0x7f.0.0.1` are
/// `127.0.0.1`), so each is checked as such.
pub fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    check_url_for(url, allow_private, "webhooks.allow_private_targets")
}

/// [`check_url`], whose refusal names `setting` as what lets private addresses through.
pub fn check_url_for(
    url: &str,
    allow_private: bool,
    setting: &str,
) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{url}` is not an http(s) URL"));
    }
    let Some(host) = parsed.host_str() else {
        return Err(format!("`{url}` has no host"));
    };
    if !allow_private {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let private = match bare.parse::<IpAddr>() {
            Ok(ip) => is_private(ip),
            Err(_) => bare.eq_ignore_ascii_case("localhost") || bare.ends_with(".localhost"),
        };
        if private {
            return Err(format!(
                "`{url}` is a loopback or private address ({setting} = true lets it through)"
            ));
        }
    }
    Ok(parsed)
}

/// The system resolver, keeping only public addresses (all of them when private targets are
/// allowed).
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = format!("{}:0", name.as_str());
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host(host)
                .await?
                .filter(|addr| allow_private || !is_private(addr.ip()))
                .collect();
            if addrs.is_empty() {
                let refused = format!(
                    "{} resolves to no public address (webhooks.allow_private_targets)",
                    name.as_str()
                );
                return Err(refused.into());
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The client deliveries go out on: the guarded resolver, no redirects, `timeout` per attempt.
pub fn client(allow_private: bool, timeout: std::time::Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(GuardedResolver { allow_private }))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .user_agent(concat!("harness/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_public_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(is_private(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "100.128.0.1",
        ] {
            assert!(!is_private(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_checked_before_any_lookup() {
        assert!(check_url("https://example.com/hook", false).is_ok());
        for (url, why) in [
            ("ftp://example.com/", "http(s)"),
            ("not a url", "not a URL"),
            ("http://127.0.0.1:9/", "private"),
            ("http://[::1]/", "private"),
            ("http://localhost:8080/", "private"),
            ("http://169.254.169.254/latest/meta-data", "private"),
        ] {
            let err = check_url(url, false).unwrap_err();
            assert!(err.contains(why), "{url}: {err}");
        }
        assert!(check_url("http://127.0.0.1:9/", true).is_ok());
    }

    /// Every way of writing a loopback or unspecified address (#46: each reached the OAuth
    /// metadata fetch) is one.
    #[test]
    fn address_literals_in_every_form_are_refused() {
        for host in [
            "127.0.0.1",
            "2130706433",
            "127.1",
            "0x7f.0.0.1",
            "[::ffff:127.0.0.1]",
            "0.0.0.0",
            "[::1]",
            "017700000001",
        ] {
            let url = format!("https://{host}:8443/c.json");
            let err = check_url_for(&url, false, "oauth.allow_private_client_urls").unwrap_err();
            assert!(
                err.contains("oauth.allow_private_client_urls"),
                "{url}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn the_resolver_drops_private_addresses() {
        let refused = GuardedResolver {
            allow_private: false,
        }
        .resolve("localhost".parse().unwrap())
        .await;
        assert!(refused.is_err());
        let allowed = GuardedResolver {
            allow_private: true,
        }
        .resolve("localhost".parse().unwrap())
        .await;
        assert!(allowed.unwrap().next().is_some());
    }
}
