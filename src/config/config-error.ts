/** A config file failed to load; the message names the file and the path inside it. */
export class ConfigError extends Error {
  constructor(
    readonly file: string,
    readonly path: string,
    readonly detail: string,
  ) {
    super(path ? `${file}: ${path}: ${detail}` : `${file}: ${detail}`);
    this.name = 'ConfigError';
  }
}
