//! A brake on guessing credentials (reliability AUTH-12).
//!
//! Each client address has a budget of failed authentications: `per_minute` at once, refilled at
//! `per_minute` a minute. A client whose budget is spent gets `429 RATE_LIMITED` with
//! `retryAfterMs` instead of `401`, and its credentials are no longer verified when verifying is
//! costly (a JWT signature): the CPU an attacker can burn is bounded by the refill rate. Other
//! clients are not affected, and neither is a client behind the same address whose credential
//! authenticated recently (its hash is remembered) or whose credential is cheap to check (a
//! static token's hash lookup): only failures count, and only failures are refused.
//!
//! IPv6 clients are keyed by their /64, which one host usually owns whole. Addresses are tracked
//! up to [`MAX_CLIENTS`]; past that, clients with a full budget are forgotten first, and a client
//! that still finds no room is not limited (memory stays bounded under an address flood).

use agent_runtime::sync::Locked;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// Client addresses tracked at most.
pub const MAX_CLIENTS: usize = 10_000;
/// Credentials remembered as recently good.
const KNOWN_GOOD: usize = 4_096;

/// What to do with a request before its credential is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Check the credential as usual.
    Verify,
    /// The client's failure budget is spent: answer `429` with this delay, unchecked.
    Refuse { retry_after_ms: u64 },
    /// The budget is spent, but the credential is cheap to check or known good: check it, and
    /// answer a failure with `429` and this delay.
    VerifyThenRefuseFailure { retry_after_ms: u64 },
}

/// Failure budgets per client address.
#[derive(Debug)]
pub struct FailureLimiter {
    per_minute: u32,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    budgets: HashMap<IpAddr, Budget>,
    known_good: HashSet<[u8; 32]>,
    known_good_order: VecDeque<[u8; 32]>,
}

#[derive(Clone, Copy, Debug)]
struct Budget {
    left: f64,
    at: Instant,
}

impl FailureLimiter {
    /// `None` when `per_minute` is 0 (the brake is off).
    pub fn new(per_minute: u32) -> Option<Self> {
        (per_minute > 0).then(|| Self {
            per_minute,
            state: Mutex::new(State::default()),
        })
    }

    /// Decides before verification. `cheap` says whether verifying costs next to nothing.
    pub fn check(&self, client: IpAddr, credential: &[u8], cheap: bool) -> Verdict {
        let state = self.lock();
        let Some(budget) = state.budgets.get(&client_key(client)).copied() else {
            return Verdict::Verify;
        };
        let left = self.refilled(budget, Instant::now());
        if left >= 1.0 {
            return Verdict::Verify;
        }
        let retry_after_ms = self.wait_for_one(left);
        if cheap || state.known_good.contains(&digest(credential)) {
            Verdict::VerifyThenRefuseFailure { retry_after_ms }
        } else {
            Verdict::Refuse { retry_after_ms }
        }
    }

    /// A credential was refused: the client's budget shrinks by one.
    pub fn failed(&self, client: IpAddr) {
        let now = Instant::now();
        let key = client_key(client);
        let mut state = self.lock();
        if !state.budgets.contains_key(&key) && state.budgets.len() >= MAX_CLIENTS {
            let full = f64::from(self.per_minute);
            state
                .budgets
                .retain(|_, budget| self.refilled(*budget, now) < full);
            if state.budgets.len() >= MAX_CLIENTS {
                return;
            }
        }
        let budget = state.budgets.entry(key).or_insert(Budget {
            left: f64::from(self.per_minute),
            at: now,
        });
        let left = self.refilled(*budget, now);
        *budget = Budget {
            left: (left - 1.0).max(0.0),
            at: now,
        };
    }

    /// A credential was accepted: it stays usable while its client's budget is spent.
    pub fn succeeded(&self, credential: &[u8]) {
        let hash = digest(credential);
        let mut state = self.lock();
        if state.known_good.insert(hash) {
            state.known_good_order.push_back(hash);
            if state.known_good_order.len() > KNOWN_GOOD
                && let Some(oldest) = state.known_good_order.pop_front()
            {
                state.known_good.remove(&oldest);
            }
        }
    }

    fn refilled(&self, budget: Budget, now: Instant) -> f64 {
        let per_second = f64::from(self.per_minute) / 60.0;
        let elapsed = now.saturating_duration_since(budget.at).as_secs_f64();
        (budget.left + elapsed * per_second).min(f64::from(self.per_minute))
    }

    fn wait_for_one(&self, left: f64) -> u64 {
        let per_second = f64::from(self.per_minute) / 60.0;
        let wait = Duration::from_secs_f64((1.0 - left).max(0.0) / per_second);
        (wait.as_millis() as u64).max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }
}

/// IPv4 addresses (IPv4-mapped ones included) as they are; IPv6 by their /64.
fn client_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

fn digest(credential: &[u8]) -> [u8; 32] {
    Sha256::digest(credential).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTACKER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const NEIGHBOUR: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_refuses_until_it_refills() {
        let limiter = FailureLimiter::new(6).unwrap();
        for _ in 0..6 {
            assert_eq!(limiter.check(ATTACKER, b"bad", false), Verdict::Verify);
            limiter.failed(ATTACKER);
        }
        // Six a minute: one more every ten seconds.
        assert_eq!(
            limiter.check(ATTACKER, b"bad", false),
            Verdict::Refuse {
                retry_after_ms: 10_000
            }
        );
        assert_eq!(limiter.check(NEIGHBOUR, b"bad", false), Verdict::Verify);
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            limiter.check(ATTACKER, b"bad", false),
            Verdict::Refuse {
                retry_after_ms: 6_000
            }
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(limiter.check(ATTACKER, b"bad", false), Verdict::Verify);
    }

    #[tokio::test(start_paused = true)]
    async fn known_good_and_cheap_credentials_are_still_checked() {
        let limiter = FailureLimiter::new(1).unwrap();
        limiter.succeeded(b"Bearer good");
        limiter.failed(ATTACKER);
        let spent = Verdict::VerifyThenRefuseFailure {
            retry_after_ms: 60_000,
        };
        assert_eq!(limiter.check(ATTACKER, b"Bearer good", false), spent);
        assert_eq!(limiter.check(ATTACKER, b"Bearer other", true), spent);
        assert!(matches!(
            limiter.check(ATTACKER, b"Bearer other", false),
            Verdict::Refuse { .. }
        ));
    }

    #[test]
    fn ipv6_clients_share_their_slash_64_and_mapped_ipv4_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(client_key(mapped), ATTACKER);
    }

    #[tokio::test(start_paused = true)]
    async fn memory_stays_bounded_under_an_address_flood() {
        let limiter = FailureLimiter::new(1).unwrap();
        for n in 0..(MAX_CLIENTS as u32 + 500) {
            limiter.failed(IpAddr::V4(n.into()));
        }
        assert_eq!(limiter.lock().budgets.len(), MAX_CLIENTS);
        // Once budgets have refilled, their clients make room for new ones.
        tokio::time::advance(Duration::from_secs(60)).await;
        limiter.failed(ATTACKER);
        assert_eq!(limiter.lock().budgets.len(), 1);
        assert!(matches!(
            limiter.check(ATTACKER, b"x", false),
            Verdict::Refuse { .. }
        ));
    }
}
