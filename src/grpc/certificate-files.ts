import * as fs from 'node:fs';
import * as tls from 'node:tls';

/**
 * Certificate rotation for GRPC_SERVER_TLS_CERT / GRPC_SERVER_TLS_KEY (cert-manager and Kubernetes
 * secret volumes replace the files by swapping a symlink): the files are polled, following symlinks,
 * and a changed pair is handed over once it forms a valid TLS context. A half-written or mismatched
 * pair is reported once and retried at the next poll; the previous certificate keeps serving.
 */

export interface CertificatePair {
  readonly cert: Buffer;
  readonly key: Buffer;
}

export interface CertificateWatchOptions {
  readonly certPath: string;
  readonly keyPath: string;
  readonly intervalMs: number;
  readonly onChange: (pair: CertificatePair) => void;
  readonly onError: (err: Error) => void;
}

/** Starts polling; returns the function that stops it. */
export function watchCertificateFiles(options: CertificateWatchOptions): () => void {
  let applied = signature(options);
  let reported: string | undefined;
  const timer = setInterval(() => {
    const current = signature(options);
    if (current === applied) return;
    try {
      const pair = { cert: fs.readFileSync(options.certPath), key: fs.readFileSync(options.keyPath) };
      tls.createSecureContext(pair); // throws on a key that does not match the certificate
      applied = current;
      reported = undefined;
      options.onChange(pair);
    } catch (err) {
      if (reported !== current) options.onError(err as Error);
      reported = current;
    }
  }, options.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

// Identity and modification time of both files (stat follows the symlinks a secret volume swaps).
function signature(options: CertificateWatchOptions): string {
  const one = (path: string): string => {
    const st = fs.statSync(path, { throwIfNoEntry: false });
    return st === undefined ? 'missing' : `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  };
  return `${one(options.certPath)}|${one(options.keyPath)}`;
}
