/** `raw` as an absolute URL, or undefined when it is not one. */
export function absoluteUrl(raw: string): URL | undefined {
  try {
    return new URL(raw);
  } catch {
    return undefined;
  }
}

/** `host:port`, with an IPv6 host in brackets (`[::1]:80`), as URLs and listen addresses write it. */
export const hostPort = ({ host, port }: { host: string; port: number }): string =>
  `${host.includes(":") ? `[${host}]` : host}:${port}`;

/** Whether a URL carries `user:password@`: never accepted in a URL the agent stores, logs or fetches. */
export const carriesCredentials = (url: URL): boolean => url.username !== "" || url.password !== "";
