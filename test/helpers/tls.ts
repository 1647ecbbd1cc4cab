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

/**
 * A client certificate (CN `name`, clientAuth) issued by the CA `makeTestCa` made in `caDir`; `expired`: valid
 * for one day in 2020 only (`openssl ca` takes explicit dates, which `openssl x509 -req` cannot in 3.0).
 */
export function issueClientCert(
  caDir: string,
  name: string,
  opts: { expired?: boolean } = {},
): { cert: string; key: string } {
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: caDir, stdio: "pipe" });
  writeFileSync(
    join(caDir, "client-ca.cnf"),
    [
      "[ca]",
      "default_ca = tca",
      "[tca]",
      "database = index.txt",
      "new_certs_dir = .",
      "serial = serial",
      "default_md = sha256",
      "policy = pol",
      "unique_subject = no",
      "[pol]",
      "commonName = supplied",
      "[client]",
      "basicConstraints = CA:FALSE",
      "extendedKeyUsage = clientAuth",
      "",
    ].join("\n"),
  );
  writeFileSync(join(caDir, "index.txt"), "", { flag: "a" });
  try {
    readFileSync(join(caDir, "serial"));
  } catch {
    writeFileSync(join(caDir, "serial"), "1000\n");
  }
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
  const dates = opts.expired
    ? ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"]
    : ["-days", "2"];
  run(
    "ca",
    "-batch",
    "-notext",
    "-config",
    "client-ca.cnf",
    "-cert",
    "ca.crt",
    "-keyfile",
    "ca.key",
    "-extensions",
    "client",
    "-in",
    `${name}.csr`,
    "-out",
    `${name}.crt`,
    ...dates,
  );
  return { cert: join(caDir, `${name}.crt`), key: join(caDir, `${name}.key`) };
}
