import * as fs from 'node:fs';
import type * as tls from 'node:tls';
import { ServerCredentials } from '@grpc/grpc-js';
import { SettingsError, type Settings } from '../settings/settings';

/**
 * Transport security of the gRPC server, from the reference server's variables:
 * GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT / GRPC_SERVER_TLS_KEY (PEM files) serve TLS;
 * GRPC_CLIENT_TLS_CACERT additionally requires every client to present a certificate signed by that CA (mTLS).
 * The files are read here only, once per server at construction; a missing or unreadable file
 * stops the start with the variable's name. Each transport turns the material into its own form.
 */

export type GrpcTlsSettings = Settings['grpcTls'];

/** The PEM material of a TLS gRPC server; `clientCa` set means mTLS. */
export interface TlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly clientCa?: Buffer;
}

/** Reads the PEM files the settings name; undefined when TLS is off. Throws SettingsError naming the variable. */
export function loadTlsMaterial(settings: GrpcTlsSettings): TlsMaterial | undefined {
  if (!settings.enabled) return undefined;
  const cert = readPem('GRPC_SERVER_TLS_CERT', settings.certPath);
  const key = readPem('GRPC_SERVER_TLS_KEY', settings.keyPath);
  const clientCa = settings.clientCaPath === undefined ? undefined : readPem('GRPC_CLIENT_TLS_CACERT', settings.clientCaPath);
  return { cert, key, clientCa };
}

/** node:tls server options (the own HTTP/2 layer): with a client CA, a client without a certificate it signed fails the handshake. */
export function tlsServerOptions(material: TlsMaterial): tls.TlsOptions {
  const mutual = material.clientCa !== undefined;
  return { cert: material.cert, key: material.key, ca: material.clientCa, requestCert: mutual, rejectUnauthorized: mutual };
}

/** grpc-js server credentials: insecure without material, TLS or mTLS otherwise. */
export function grpcServerCredentials(material: TlsMaterial | undefined): ServerCredentials {
  if (material === undefined) return ServerCredentials.createInsecure();
  const clientCa = material.clientCa ?? null;
  // With a client CA, a handshake without a valid client certificate fails before any call is decoded.
  return ServerCredentials.createSsl(clientCa, [{ cert_chain: material.cert, private_key: material.key }], clientCa !== null);
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
