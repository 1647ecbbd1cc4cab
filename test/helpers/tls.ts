import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface TestCa {
  /** PEM file of the test CA, for `HOSTKEEPER_OPERATOR_CA_FILE` or `NODE_EXTRA_CA_CERTS`. */
  caFile: string;
  /** Key and certificate (signed by the CA) of a server on 127.0.0.1. */
  key: string;
  cert: string;
}

/** Makes a throw-away CA and a server certificate for 127.0.0.1 with openssl, in `dir`. */
export function makeTestCa(dir: string): TestCa {
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
    "-days",
    "2",
    "-subj",
    "/CN=hostkeeper test CA",
  );
  run("req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1");
  writeFileSync(
    join(dir, "server.ext"),
    "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
  );
  run(
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.crt",
    "-days",
    "2",
    "-extfile",
    "server.ext",
  );
  return {
    caFile: join(dir, "ca.crt"),
    key: readFileSync(join(dir, "server.key"), "utf8"),
    cert: readFileSync(join(dir, "server.crt"), "utf8"),
  };
}
