//! What can go wrong setting up TLS: shared by the serving configurations ([`crate::tls`])
//! and the client CAs ([`crate::client_certs`]).

/// TLS set-up failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA key in the data directory could not be read or written.
    #[error("{path}: {source}")]
    KeyFile {
        /// The key file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM certificate or key could not be read.
    #[error("reading PEM: {0}")]
    Pem(String),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}
