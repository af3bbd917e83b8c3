//! `krec push`: publish a built guest to an OCI registry in the CNCF Wasm layout.

use std::path::PathBuf;

/// The arguments of `krec push`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The built component, e.g. target/wasm32-wasip2/release/my_guest.wasm.
    file: PathBuf,
    /// Where to publish it: `oci://HOST[:PORT]/REPOSITORY:TAG`.
    reference: String,
    /// Speak plain HTTP to the registry (a registry on a trusted network, e.g. on loopback).
    #[arg(long)]
    insecure: bool,
    /// User name for the registry (with --password-stdin or KREC_REGISTRY_PASSWORD).
    #[arg(long)]
    username: Option<String>,
    /// Read the password from standard input.
    #[arg(long, requires = "username")]
    password_stdin: bool,
}

/// Push, and print the reference pinned to the pushed digest.
pub(super) async fn execute(args: Args) -> anyhow::Result<()> {
    let reference = match crate::guests::oci::reference(std::path::Path::new(&args.reference)) {
        Some(Ok(reference)) => reference,
        Some(Err(problem)) => anyhow::bail!("{problem}"),
        None => anyhow::bail!(
            "{:?}: expected oci://HOST[:PORT]/REPOSITORY:TAG",
            args.reference
        ),
    };
    let auth = match args.username {
        Some(user) => {
            let password = if args.password_stdin {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line)?;
                line.trim_end_matches(['\r', '\n']).to_owned()
            } else {
                std::env::var("KREC_REGISTRY_PASSWORD").map_err(|_| {
                    anyhow::anyhow!("--username needs --password-stdin or KREC_REGISTRY_PASSWORD")
                })?
            };
            oci_client::secrets::RegistryAuth::Basic(user, password)
        }
        None => oci_client::secrets::RegistryAuth::Anonymous,
    };
    let insecure = if args.insecure {
        vec![reference.registry().to_owned()]
    } else {
        Vec::new()
    };
    let registries = crate::guests::oci::Registries::new(
        crate::guests::oci::Registries::private_dir(),
        insecure,
    );
    if let Ok(bytes) = crate::guest::read_module(&args.file)
        && let Some(source) = crate::guest::dev_source::named_in(&bytes)
    {
        anyhow::bail!(
            "{}: a dev build (of {}, built with --dev) runs under krec dev only: push the build without --dev",
            args.file.display(),
            source.display()
        );
    }
    let digest = registries
        .push(&args.file, &reference, &auth)
        .await
        .map_err(anyhow::Error::msg)?;
    let repository = format!("{}/{}", reference.registry(), reference.repository());
    // What happened on stderr; the pinned reference alone on stdout, for scripts.
    eprintln!(
        "krec push: pushed {} as {}{repository}:{} ({digest})",
        args.file.display(),
        crate::guests::oci::SCHEME,
        reference.tag().unwrap_or("latest")
    );
    println!("{}{repository}@{digest}", crate::guests::oci::SCHEME);
    Ok(())
}
