import * as fs from 'node:fs';
import { ServerCredentials } from '@grpc/grpc-js';
import { SettingsError, type Settings } from '../settings';

/**
 * Transport security of the gRPC server, from the reference server's variables:
 * GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT / GRPC_SERVER_TLS_KEY (PEM files) serve TLS;
 * GRPC_CLIENT_TLS_CACERT additionally requires every client to present a certificate signed by that CA (mTLS).
 * Files are read once at start; a missing or unreadable file stops the start with the variable's name.
 */

export type GrpcTlsSettings = Settings['grpcTls'];

/** Server credentials for the gRPC bind: insecure when TLS is off, TLS or mTLS otherwise. */
export function grpcServerCredentials(tls: GrpcTlsSettings): ServerCredentials {
  if (!tls.enabled) return ServerCredentials.createInsecure();
  const cert = readPem('GRPC_SERVER_TLS_CERT', tls.certPath);
  const key = readPem('GRPC_SERVER_TLS_KEY', tls.keyPath);
  const clientCa = tls.clientCaPath === undefined ? null : readPem('GRPC_CLIENT_TLS_CACERT', tls.clientCaPath);
  // With a client CA, a handshake without a valid client certificate fails before any call is decoded.
  return ServerCredentials.createSsl(clientCa, [{ cert_chain: cert, private_key: key }], clientCa !== null);
}

function readPem(variable: string, file: string | undefined): Buffer {
  if (file === undefined) throw new SettingsError(variable, 'required when GRPC_SERVER_USE_TLS=true');
  let pem: Buffer;
  try {
    pem = fs.readFileSync(file);
  } catch (err) {
    throw new SettingsError(variable, `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  if (!pem.includes('-----BEGIN ')) throw new SettingsError(variable, `${file} is not a PEM file`);
  return pem;
}
