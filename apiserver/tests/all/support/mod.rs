//! What the API server's integration tests share: a server with its kubeconfig and kubectl
//! (`kubectl`), and raw TLS exchanges with it (`raw`).

pub mod kubectl;
pub mod raw;
