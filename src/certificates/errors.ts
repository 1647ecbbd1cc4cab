/**
 * Why a certificates request did not happen, as the certificates service says it; `certificatesProblem`
 * (problems.ts) turns each into the API's answer. Caddy unreachable or refusing a change are the routes
 * area's ProxyUnavailableError and ChangeRejectedError, answered as they are there.
 */

/** No custom certificate has that name. */
export class CertificateNotFoundError extends Error {
  override readonly name = "CertificateNotFoundError";

  constructor(readonly certificateName: string) {
    super(`no custom certificate is named ${certificateName}`);
  }
}

/**
 * The agent cannot tell where Caddy stores its certificates: an external Caddy without a `file_system`
 * storage in its config and no HOSTKEEPER_CADDY_DATA_DIR, or one storing them elsewhere (a database).
 */
export class CertificateStorageUnknownError extends Error {
  override readonly name = "CertificateStorageUnknownError";
}

/** A custom certificate one of whose names covers the operator's domain, which the agent alone serves. */
export class CertificateCoversOperatorDomainError extends Error {
  override readonly name = "CertificateCoversOperatorDomainError";

  constructor(
    readonly operatorDomain: string,
    /** The certificate's name (subjectAltName or CN) that covers it. */
    readonly coveredBy: string,
  ) {
    super(
      `the certificate's name ${coveredBy} covers ${operatorDomain}, the operator's domain: only the agent serves it, with the certificate Caddy manages for it`,
    );
  }
}
