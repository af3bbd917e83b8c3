//! Fault injection: rules that make the server misbehave the way real clusters do — conflicts,
//! throttling, server errors, slow requests, watches that end early, expire or lag — so a
//! reconciler's retry, relist and conflict handling can be tested on purpose.
//!
//! Rules come from a YAML file (`krec cluster --faults FILE`) or from tests through
//! [`Faults::add`] on a running server (`Server::faults`). Each request is checked
//! against the rules in order; the first rule that matches it (verb, resource, namespace, user
//! agent, field manager) and fires (its `probability`, while its `count` lasts) decides its fault.
//!
//! ```yaml
//! seed: 7                      # optional: the same faults on every run
//! rules:
//!   - verbs: [update, patch]    # get list watch create update patch delete deletecollection
//!     resources: [foos.samplecontroller.k8s.io, deployments/status]
//!     namespaces: [default]     # empty or absent: every namespace
//!     fieldManagers: [krec-*]   # only writes by these managers (`*` at the end: a prefix)
//!     fault: conflict           # conflict | throttle | error | gone | latency | end-watch | expire-watch | slow-watch
//!     probability: 0.3          # default 1
//!     count: 10                 # only the next 10 that fire; absent: no limit
//!   - verbs: [watch]
//!     fault: end-watch
//!     after: 3s                 # end-watch: the watch ends cleanly after this long
//!   - fault: throttle
//!     retryAfter: 1s            # 429 with Retry-After
//!   - fault: error
//!     status: 503               # 500 (default) or 503
//!   - fault: latency
//!     delay: 200ms              # then the request is served
//!   - verbs: [watch]
//!     resources: [deployments]
//!     fault: slow-watch
//!     delay: 2s                 # every event reaches the client 2 s after it happened
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use krec_core::error::ApiError;

/// What a rule does to a request it fires on.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// 409 Conflict, as a stale resourceVersion gets.
    Conflict,
    /// 429 Too Many Requests with `Retry-After`.
    Throttle {
        /// The `Retry-After` (whole seconds, at least 1).
        retry_after: Duration,
    },
    /// A server error: 500 Internal Server Error or 503 Service Unavailable.
    Error {
        /// 500 or 503.
        status: u16,
    },
    /// Serve the request after this delay.
    Latency(Duration),
    /// A watch that ends cleanly after this long (the client must re-watch).
    EndWatch(Duration),
    /// A watch answered at once with a 410 Gone ERROR event (the client must relist).
    ExpireWatch,
    /// 410 Gone (`Expired`) for any request: what a list from a resourceVersion older than the
    /// server's history gets (the client must list again from scratch).
    Gone,
    /// A watch whose every event reaches the client this long after the store made it (a
    /// lagging watch cache): what a controller's cache looks like just after its own write.
    SlowWatch(Duration),
}

/// Which requests a rule applies to. Empty lists match everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matcher {
    /// Verbs: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verbs: Vec<String>,
    /// Resources: `plural`, `plural.group`, with `/status` or `/scale` for a subresource;
    /// `*` for all. A plain plural does not match its subresources (as in RBAC).
    pub resources: Vec<String>,
    /// Namespaces.
    pub namespaces: Vec<String>,
    /// Substring of the `User-Agent` header.
    pub user_agent: Option<String>,
    /// The write's `fieldManager`, one of these (`*` at the end matches a prefix). Deletes and
    /// reads carry no field manager, so a rule with managers never matches them: match their
    /// client by `user_agent` instead.
    pub field_managers: Vec<String>,
}

/// One rule: which requests, what fault, how often.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Which requests.
    pub matcher: Matcher,
    /// What happens to them.
    pub fault: Fault,
    /// Chance each matching request fires (0 to 1).
    pub probability: f64,
    /// Fire for this many requests only.
    pub count: Option<u64>,
}

impl Rule {
    /// A rule firing `fault` on every request.
    pub fn new(fault: Fault) -> Self {
        Rule {
            matcher: Matcher::default(),
            fault,
            probability: 1.0,
            count: None,
        }
    }

    /// Only for these verbs.
    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.matcher.verbs = verbs.iter().map(|v| (*v).to_owned()).collect();
        self
    }

    /// Only for these resources (see [`Matcher::resources`]).
    pub fn resources(mut self, resources: &[&str]) -> Self {
        self.matcher.resources = resources.iter().map(|r| (*r).to_owned()).collect();
        self
    }

    /// Only in these namespaces.
    pub fn namespaces(mut self, namespaces: &[&str]) -> Self {
        self.matcher.namespaces = namespaces.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Only for writes by these field managers (`*` at the end: a prefix).
    pub fn field_managers(mut self, managers: &[&str]) -> Self {
        self.matcher.field_managers = managers.iter().map(|m| (*m).to_owned()).collect();
        self
    }

    /// Only for clients whose `User-Agent` contains `agent`.
    pub fn user_agent(mut self, agent: &str) -> Self {
        self.matcher.user_agent = Some(agent.to_owned());
        self
    }

    /// Fire with this probability.
    pub fn probability(mut self, probability: f64) -> Self {
        self.probability = probability;
        self
    }

    /// Fire this many times only.
    pub fn count(mut self, count: u64) -> Self {
        self.count = Some(count);
        self
    }
}

/// A request as the rules see it.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The verb (see [`Matcher::verbs`]).
    pub verb: &'a str,
    /// The resource's plural.
    pub plural: &'a str,
    /// Its API group (`""` for core).
    pub group: &'a str,
    /// The subresource, if any (`status`, `scale`).
    pub subresource: Option<&'a str>,
    /// The namespace, if any.
    pub namespace: Option<&'a str>,
    /// The object's name, if any.
    pub name: Option<&'a str>,
    /// The `User-Agent` header.
    pub user_agent: &'a str,
    /// The `fieldManager` parameter.
    pub field_manager: Option<&'a str>,
}

impl Matcher {
    fn matches(&self, request: &Request<'_>) -> bool {
        let verb = self.verbs.is_empty() || self.verbs.iter().any(|v| v == request.verb);
        let resource = self.resources.is_empty()
            || self.resources.iter().any(|r| {
                let (name, sub) = match r.split_once('/') {
                    Some((name, sub)) => (name, Some(sub)),
                    None => (r.as_str(), None),
                };
                if name == "*" {
                    return true;
                }
                let (plural, group) = name.split_once('.').unwrap_or((name, ""));
                plural == request.plural
                    && (group.is_empty() && !name.contains('.') || group == request.group)
                    && sub == request.subresource
            });
        let namespace = self.namespaces.is_empty()
            || request
                .namespace
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns));
        let agent = self
            .user_agent
            .as_deref()
            .is_none_or(|a| request.user_agent.contains(a));
        let manager = self.field_managers.is_empty()
            || self.field_managers.iter().any(|want| {
                request
                    .field_manager
                    .is_some_and(|got| match want.strip_suffix('*') {
                        Some(prefix) => got.starts_with(prefix),
                        None => got == want,
                    })
            });
        verb && resource && namespace && agent && manager
    }
}

struct Armed {
    rule: Rule,
    fired: AtomicU64,
}

/// The server's fault rules and how often each fired. Shared by the server and whoever adds
/// rules; empty by default (no request is touched).
pub struct Faults {
    rules: Mutex<Vec<Armed>>,
    rng: Mutex<u64>,
    total: AtomicU64,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rules: Vec<Rule> = self.lock().iter().map(|a| a.rule.clone()).collect();
        f.debug_struct("Faults")
            .field("rules", &rules)
            .field("total", &self.total())
            .finish()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::with_seed(u64::from_le_bytes(
            uuid::Uuid::new_v4().as_bytes()[..8]
                .try_into()
                .unwrap_or([7; 8]),
        ))
    }
}

/// The YAML form of the rules (see the [module docs](self)).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    seed: Option<u64>,
    #[serde(default)]
    rules: Vec<FileRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileRule {
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    user_agent: Option<String>,
    #[serde(default)]
    field_managers: Vec<String>,
    fault: String,
    status: Option<u16>,
    retry_after: Option<String>,
    delay: Option<String>,
    after: Option<String>,
    probability: Option<f64>,
    count: Option<u64>,
}

const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

impl FileRule {
    fn into_rule(self) -> Result<Rule, String> {
        let duration = |field: &str, value: &Option<String>, default: Option<Duration>| match value
        {
            Some(text) => krec_core::duration::parse(text).map_err(|e| format!("{field}: {e}")),
            None => default.ok_or_else(|| format!("fault {} needs {field}", self.fault)),
        };
        let fault = match self.fault.as_str() {
            "conflict" => Fault::Conflict,
            "throttle" => Fault::Throttle {
                retry_after: duration(
                    "retryAfter",
                    &self.retry_after,
                    Some(Duration::from_secs(1)),
                )?,
            },
            "error" => match self.status.unwrap_or(500) {
                status @ (500 | 503) => Fault::Error { status },
                other => return Err(format!("status: {other} is not 500 or 503")),
            },
            "latency" => Fault::Latency(duration("delay", &self.delay, None)?),
            "end-watch" => Fault::EndWatch(duration("after", &self.after, None)?),
            "expire-watch" => Fault::ExpireWatch,
            "gone" => Fault::Gone,
            "slow-watch" => Fault::SlowWatch(duration("delay", &self.delay, None)?),
            other => {
                return Err(format!(
                    "unknown fault {other:?} (expected conflict, throttle, error, gone, latency, end-watch, expire-watch or slow-watch)"
                ));
            }
        };
        if let Some(verb) = self.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
            return Err(format!(
                "unknown verb {verb:?} (expected one of {})",
                VERBS.join(", ")
            ));
        }
        let probability = self.probability.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&probability) {
            return Err(format!("probability {probability} is not between 0 and 1"));
        }
        Ok(Rule {
            matcher: Matcher {
                verbs: self.verbs,
                resources: self.resources,
                namespaces: self.namespaces,
                user_agent: self.user_agent,
                field_managers: self.field_managers,
            },
            fault,
            probability,
            count: self.count,
        })
    }
}

impl Faults {
    /// No rules; random choices from `seed` (the same faults on every run).
    pub fn with_seed(seed: u64) -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            rng: Mutex::new(seed | 1),
            total: AtomicU64::new(0),
        }
    }

    /// Rules from YAML text (see the [module docs](self)); errors name the rule.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let file: File = krec_core::yaml::from_slice(text.as_bytes()).map_err(|e| e.to_string())?;
        let faults = match file.seed {
            Some(seed) => Self::with_seed(seed),
            None => Self::default(),
        };
        for (i, rule) in file.rules.into_iter().enumerate() {
            let rule = rule.into_rule().map_err(|e| format!("rules[{i}]: {e}"))?;
            faults.add(rule);
        }
        Ok(faults)
    }

    /// Rules from a YAML file; errors name the file.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_yaml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Armed>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add a rule after the others; returns its index for [`fired`](Self::fired).
    pub fn add(&self, rule: Rule) -> usize {
        let mut rules = self.lock();
        rules.push(Armed {
            rule,
            fired: AtomicU64::new(0),
        });
        rules.len() - 1
    }

    /// Remove every rule (the counts of [`total`](Self::total) stay).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// How many requests rule `index` has fired on.
    pub fn fired(&self, index: usize) -> u64 {
        self.lock()
            .get(index)
            .map_or(0, |a| a.fired.load(Ordering::Relaxed))
    }

    /// How many faults were injected in all.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Whether any rule is set (the request path skips the rest when none is).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The fault for `request`, if a rule fires on it.
    pub fn decide(&self, request: &Request<'_>) -> Option<Fault> {
        let rules = self.lock();
        for armed in rules.iter() {
            let rule = &armed.rule;
            if !rule.matcher.matches(request) {
                continue;
            }
            if rule
                .count
                .is_some_and(|c| armed.fired.load(Ordering::Relaxed) >= c)
            {
                continue;
            }
            if rule.probability < 1.0 && self.uniform() >= rule.probability {
                continue;
            }
            armed.fired.fetch_add(1, Ordering::Relaxed);
            self.total.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                verb = request.verb,
                resource = request.plural,
                name = request.name.unwrap_or(""),
                "injecting {:?}",
                rule.fault
            );
            return Some(rule.fault.clone());
        }
        None
    }

    /// A number in [0, 1) (xorshift64*).
    fn uniform(&self) -> f64 {
        let mut state = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let x = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The error a fault answers with (`None` for latency and watch faults, which shape the
/// request rather than refuse it).
pub fn refusal(fault: &Fault, request: &Request<'_>) -> Option<ApiError> {
    let name = request.name.unwrap_or_default();
    match fault {
        Fault::Conflict => Some(ApiError::conflict(request.group, request.plural, name)),
        Fault::Throttle { retry_after } => {
            let seconds = retry_after.as_secs().max(1);
            let mut err = ApiError::too_many_requests(
                "the server has received too many requests and has asked us to try again later",
            );
            err.details = Some(json!({"retryAfterSeconds": seconds}));
            Some(err)
        }
        Fault::Error { status: 503 } => Some(ApiError::unavailable(
            "the server is currently unable to handle the request (injected fault)",
        )),
        Fault::Error { .. } => Some(ApiError::internal(
            "Internal error occurred: injected fault",
        )),
        Fault::Gone => Some(ApiError::gone("too old resource version (injected fault)")),
        Fault::Latency(_) | Fault::EndWatch(_) | Fault::ExpireWatch | Fault::SlowWatch(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(verb: &'a str, plural: &'a str, manager: Option<&'a str>) -> Request<'a> {
        Request {
            verb,
            plural,
            group: "",
            subresource: None,
            namespace: Some("default"),
            name: Some("x"),
            user_agent: "kubectl/v1.34",
            field_manager: manager,
        }
    }

    #[test]
    fn rules_should_match_verbs_resources_and_managers() {
        let faults = Faults::with_seed(1);
        let i = faults.add(
            Rule::new(Fault::Conflict)
                .verbs(&["update"])
                .resources(&["configmaps"])
                .field_managers(&["krec-*"]),
        );
        assert_eq!(
            faults.decide(&request("update", "configmaps", Some("krec-a"))),
            Some(Fault::Conflict)
        );
        assert_eq!(
            faults.decide(&request("update", "configmaps", Some("kubectl"))),
            None
        );
        assert_eq!(
            faults.decide(&request("patch", "configmaps", Some("krec-a"))),
            None
        );
        assert_eq!(
            faults.decide(&request("update", "secrets", Some("krec-a"))),
            None
        );
        let mut status = request("update", "configmaps", Some("krec-a"));
        status.subresource = Some("status");
        assert_eq!(
            faults.decide(&status),
            None,
            "a plain plural leaves subresources alone"
        );
        assert_eq!(faults.fired(i), 1);
    }

    #[test]
    fn probability_and_count_should_bound_how_often_a_rule_fires() {
        let faults = Faults::with_seed(42);
        let i = faults.add(Rule::new(Fault::Error { status: 503 }).probability(0.3));
        let fired = (0..10_000)
            .filter(|_| faults.decide(&request("get", "pods", None)).is_some())
            .count();
        assert!((2_700..3_300).contains(&fired), "{fired} of 10000 at 30 %");
        assert_eq!(faults.fired(i), fired as u64);
        faults.clear();
        faults.add(Rule::new(Fault::Conflict).count(2));
        let fired = (0..10)
            .filter(|_| faults.decide(&request("get", "pods", None)).is_some())
            .count();
        assert_eq!(fired, 2);
    }

    #[test]
    fn a_slow_watch_should_be_read_from_yaml() {
        let faults = Faults::from_yaml(
            "rules:\n- {verbs: [watch], resources: [deployments], fault: slow-watch, delay: 2s}\n",
        )
        .expect("rules");
        assert_eq!(
            faults.decide(&request("watch", "deployments", None)),
            Some(Fault::SlowWatch(Duration::from_secs(2)))
        );
        assert_eq!(faults.decide(&request("watch", "pods", None)), None);
        let err = Faults::from_yaml("rules:\n- {fault: slow-watch}\n").expect_err("no delay");
        assert!(err.contains("delay"), "{err}");
    }

    #[test]
    fn yaml_rules_should_load_and_name_their_mistakes() {
        let faults = Faults::from_yaml(
            "seed: 3\nrules:\n- {verbs: [watch], fault: end-watch, after: 2s}\n- {fault: throttle, retryAfter: 2s, probability: 0.5}\n",
        )
        .expect("valid");
        assert_eq!(
            faults.decide(&request("watch", "pods", None)),
            Some(Fault::EndWatch(Duration::from_secs(2)))
        );
        let err = Faults::from_yaml("rules:\n- {fault: latency}\n").expect_err("no delay");
        assert_eq!(err, "rules[0]: fault latency needs delay");
        let err = Faults::from_yaml("rules:\n- {fault: conflict, verbs: [edit]}\n")
            .expect_err("bad verb");
        assert!(err.starts_with("rules[0]: unknown verb \"edit\""), "{err}");
        let err = Faults::from_yaml("rules:\n- {fault: explode}\n").expect_err("bad fault");
        assert!(err.contains("unknown fault \"explode\""), "{err}");
        let err =
            Faults::from_yaml("rules:\n- {fault: conflict, probabilty: 1}\n").expect_err("typo");
        assert!(err.contains("probabilty"), "{err}");
    }

    #[test]
    fn refusals_should_read_as_kube_apiservers() {
        let r = request("update", "configmaps", None);
        let conflict = refusal(&Fault::Conflict, &r).expect("refused");
        assert_eq!(conflict.code, 409);
        assert!(
            conflict.message.contains("the object has been modified"),
            "{}",
            conflict.message
        );
        let throttled = refusal(
            &Fault::Throttle {
                retry_after: Duration::from_secs(2),
            },
            &r,
        )
        .expect("refused");
        assert_eq!(throttled.code, 429);
        assert_eq!(throttled.details, Some(json!({"retryAfterSeconds": 2})));
        assert_eq!(
            refusal(&Fault::Error { status: 503 }, &r).map(|e| e.code),
            Some(503)
        );
        assert_eq!(refusal(&Fault::Latency(Duration::ZERO), &r), None);
    }
}
