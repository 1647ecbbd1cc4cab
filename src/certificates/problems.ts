import { ApiError } from "../http/errors.js";
import { UnsafePathError } from "../util/shared-folder.js";
import {
  CertificateCoversOperatorDomainError,
  CertificateNotFoundError,
  CertificateStorageUnknownError,
} from "./errors.js";

/** The certificates area's errors as problems: the one place they meet HTTP. */
export function certificatesProblem(err: unknown): ApiError | undefined {
  if (err instanceof CertificateNotFoundError) return new ApiError("certificate_not_found", err.message);
  if (err instanceof CertificateStorageUnknownError)
    return new ApiError("certificate_storage_unknown", err.message);
  if (err instanceof UnsafePathError) return new ApiError("unsafe_file", err.withoutFolders());
  if (err instanceof CertificateCoversOperatorDomainError)
    return new ApiError("operator_domain_reserved", err.message, {
      extensions: { operator_domain: err.operatorDomain, covered_by: err.coveredBy },
    });
  return undefined;
}
