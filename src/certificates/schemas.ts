import { type Static, Type } from "@sinclair/typebox";
import { NullableString, StringEnum } from "../util/typebox.js";
import { CERTIFICATE_NAME } from "./custom-store.js";
import { CERTIFICATE_SOURCES, CERTIFICATE_STATUSES } from "./entries.js";
import { MAX_PEM_BYTES } from "./pem.js";

const NULL_WHEN_MISSING = "Null when the host has no certificate (`missing`).";

export const CertificateErrorSchema = Type.Object(
  {
    message: Type.String({ description: "Caddy's words (its log's `error`)." }),
    at: NullableString(Type.String({ format: "date-time", description: "When Caddy logged it." })),
  },
  {
    additionalProperties: false,
    $id: "CertificateError",
    title: "CertificateError",
    description:
      "Caddy's last failure to obtain or renew a certificate for the host, as its log says it (loggers `tls.obtain` and `tls.renew`).",
  },
);

export const CertificateSchema = Type.Object(
  {
    host: NullableString(
      Type.String({
        description:
          "The host of a route this entry is for (a domain or a `redirect_from` host); null on a custom certificate's own entry.",
      }),
    ),
    name: NullableString(
      Type.String({ description: "The custom certificate's name when `source` is `custom`; else null." }),
    ),
    names: Type.Array(Type.String(), {
      description: "The names the certificate covers (its subjectAltName); `[]` when there is none.",
    }),
    source: Type.Union([StringEnum(CERTIFICATE_SOURCES), Type.Null()], {
      description:
        "`acme`: issued by an ACME CA; `internal`: by Caddy's local CA; `custom`: put through this API. Null when `missing`.",
    }),
    issuer: NullableString(
      Type.String({ description: `The issuer's distinguished name. ${NULL_WHEN_MISSING}` }),
    ),
    serial: NullableString(
      Type.String({ description: `The serial number in hexadecimal, uppercase. ${NULL_WHEN_MISSING}` }),
    ),
    not_before: NullableString(Type.String({ format: "date-time", description: NULL_WHEN_MISSING })),
    not_after: NullableString(Type.String({ format: "date-time", description: NULL_WHEN_MISSING })),
    status: StringEnum(CERTIFICATE_STATUSES, {
      description:
        "`valid`; `expiring`: less time left than both HOSTKEEPER_CERT_EXPIRY_WARNING_DAYS and a third of its life; `expired`; `missing`: the host has no certificate yet.",
    }),
    error: Type.Union([Type.Ref("CertificateError"), Type.Null()], {
      description:
        "For a host whose certificate is not `valid`: Caddy's last failure to get one, when its log has one; else null.",
    }),
  },
  {
    additionalProperties: false,
    $id: "Certificate",
    title: "Certificate",
    description: "A certificate as Caddy serves it for a host, or a custom certificate.",
  },
);

export const CertificateListSchema = Type.Object(
  {
    certificates: Type.Array(Type.Ref("Certificate"), {
      description:
        "One entry per host of the managed server's routes, by host, then one per custom certificate, by name.",
    }),
  },
  { additionalProperties: false, $id: "CertificateList", title: "CertificateList" },
);

export const CustomCertificateRequestSchema = Type.Object(
  {
    certificate_pem: Type.String({
      minLength: 1,
      maxLength: MAX_PEM_BYTES,
      description:
        "The certificate chain in PEM: the certificate first, then each intermediate after the certificate it issued.",
    }),
    key_pem: Type.String({
      minLength: 1,
      maxLength: MAX_PEM_BYTES,
      description: "The certificate's private key in PEM, unencrypted. Never logged, never answered.",
    }),
  },
  {
    additionalProperties: false,
    $id: "CustomCertificateRequest",
    title: "CustomCertificateRequest",
    description: "At most 64 KiB together.",
  },
);

export const CertificateNameParamsSchema = Type.Object(
  {
    name: Type.String({
      pattern: CERTIFICATE_NAME.source,
      description:
        "The custom certificate's name, chosen by the caller: 1-64 characters of `a-z 0-9 . _ -`, starting with a letter or digit, without `..` (e.g. `example.com` or `wildcard-example-com`).",
    }),
  },
  { additionalProperties: false },
);

export const certificatesSharedSchemas = [
  CertificateErrorSchema,
  CertificateSchema,
  CertificateListSchema,
  CustomCertificateRequestSchema,
];

export type CustomCertificateRequest = Static<typeof CustomCertificateRequestSchema>;
