import { Type } from "@sinclair/typebox";
import { jsonContent, problemResponses } from "../http/schemas.js";
import type { App } from "../http/types.js";
import { RefTo } from "../util/typebox.js";
import { CertificateNameParamsSchema, CustomCertificateRequestSchema } from "./schemas.js";
import type { CertificateService } from "./service.js";

const TAGS = ["proxy"];
const CertificateRef = Type.Ref("Certificate");

const listSchema = {
  tags: TAGS,
  operationId: "listCertificates",
  summary: "List the certificates of the managed server's hosts and the custom certificates",
  description:
    "For every host the managed server's routes serve, the certificate a TLS client gets for it (read from what Caddy stores and loads) with its status, and Caddy's last error for a host without a valid one; then every custom certificate (docs/api/certificates.md).",
  response: {
    200: jsonContent(Type.Ref("CertificateList"), "The certificates."),
    ...problemResponses("proxy_unavailable", "certificate_storage_unknown", "unsafe_file"),
  },
};

const putSchema = {
  tags: TAGS,
  operationId: "putCertificate",
  summary: "Put a custom certificate",
  description:
    "Stores the certificate chain and key as the custom certificate `name` and loads them into Caddy from files only Caddy's user can read: the hosts it covers are served with it instead of an issued certificate. A certificate of the same name is replaced in the same config change. 400 when the chain does not parse, the key is not the leaf's, the leaf has expired, or both are over 64 KiB together; 409 `operator_domain_reserved` when one of the leaf's names (subjectAltName or CN) covers the operator's domain.",
  params: CertificateNameParamsSchema,
  body: RefTo(CustomCertificateRequestSchema),
  response: {
    200: jsonContent(CertificateRef, "Replaced: the certificate's entry."),
    201: jsonContent(CertificateRef, "Created: the certificate's entry."),
    ...problemResponses(
      "validation_failed",
      "malformed_body",
      "payload_too_large",
      "unsupported_media_type",
      "operator_domain_reserved",
      "proxy_unavailable",
      "proxy_rejected_change",
      "certificate_storage_unknown",
      "unsafe_file",
    ),
  },
};

const getSchema = {
  tags: TAGS,
  operationId: "getCertificate",
  summary: "Get a custom certificate",
  description: "The entry of the custom certificate `name` (never its key).",
  params: CertificateNameParamsSchema,
  response: {
    200: jsonContent(CertificateRef, "The certificate's entry."),
    ...problemResponses("validation_failed", "certificate_not_found"),
  },
};

const deleteSchema = {
  tags: TAGS,
  operationId: "deleteCertificate",
  summary: "Delete a custom certificate",
  description:
    "Unloads the custom certificate `name` from Caddy and removes its files: the hosts it covered go back to issued certificates.",
  params: CertificateNameParamsSchema,
  response: {
    204: { description: "Deleted.", type: "null" },
    ...problemResponses(
      "validation_failed",
      "certificate_not_found",
      "proxy_unavailable",
      "proxy_rejected_change",
      "certificate_storage_unknown",
      "unsafe_file",
    ),
  },
};

export function registerCertificateRoutes(app: App, service: CertificateService): void {
  app.get("/v1/proxy/certificates", { schema: listSchema }, async () => ({
    certificates: await service.list(),
  }));

  app.get("/v1/proxy/certificates/:name", { schema: getSchema }, async (request) =>
    service.get(request.params.name),
  );

  app.put("/v1/proxy/certificates/:name", { schema: putSchema }, async (request, reply) => {
    const { certificate_pem, key_pem } = request.body;
    const { created, entry } = await service.put(request.params.name, certificate_pem, key_pem);
    return reply.code(created ? 201 : 200).send(entry);
  });

  app.delete("/v1/proxy/certificates/:name", { schema: deleteSchema }, async (request, reply) => {
    await service.delete(request.params.name);
    return reply.code(204).send();
  });
}
