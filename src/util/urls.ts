/** `raw` as an absolute URL, or undefined when it is not one. */
export function absoluteUrl(raw: string): URL | undefined {
  try {
    return new URL(raw);
  } catch {
    return undefined;
  }
}

/** Whether a URL carries `user:password@`: never accepted in a URL the agent stores, logs or fetches. */
export const carriesCredentials = (url: URL): boolean => url.username !== "" || url.password !== "";
