import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * Test PKI made with the `openssl` command line in a fresh temp directory: a CA, a server
 * certificate for localhost / 127.0.0.1, a client certificate, and a client certificate from an
 * unrelated CA (which an mTLS server must refuse). EC P-256 keys keep generation fast.
 */

export interface CertFiles {
  readonly dir: string;
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
  /** Signed by a different CA than caCert. */
  readonly strangerCert: string;
  readonly strangerKey: string;
  /** A client certificate from caCert with the subject alternative name DNS:envoy.mesh. */
  readonly meshClientCert: string;
  readonly meshClientKey: string;
  /** A second server certificate for localhost from caCert (a rotation's replacement). */
  readonly nextServerCert: string;
  readonly nextServerKey: string;
  /** Deletes the directory. */
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
    if (e.code === 'ENOENT') throw new Error('the openssl command is required by the TLS tests (apt-get install openssl)');
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? e.message}`);
  }
}

const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(dir: string, name: string): void {
  openssl(
    [
      'req',
      '-x509',
      ...EC_KEY,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.crt`,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
}

function makeLeaf(dir: string, options: { name: string; ca: string; cn: string; extensions: string }): void {
  const { name, ca, cn, extensions } = options;
  fs.writeFileSync(path.join(dir, `${name}.ext`), extensions);
  openssl(['req', ...EC_KEY, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${ca}.crt`,
      '-CAkey',
      `${ca}.key`,
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
    ],
    dir,
  );
}

/** Generates the certificates; call remove() when done. */
export function makeTestCerts(): CertFiles {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-certs-'));
  makeCa(dir, 'ca');
  makeCa(dir, 'stranger-ca');
  makeLeaf(dir, {
    name: 'server',
    ca: 'ca',
    cn: 'localhost',
    extensions: 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n',
  });
  const clientExtensions = 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n';
  makeLeaf(dir, { name: 'client', ca: 'ca', cn: 'client', extensions: clientExtensions });
  makeLeaf(dir, { name: 'stranger', ca: 'stranger-ca', cn: 'stranger', extensions: clientExtensions });
  makeLeaf(dir, { name: 'mesh-client', ca: 'ca', cn: 'mesh', extensions: `subjectAltName=DNS:envoy.mesh\n${clientExtensions}` });
  makeLeaf(dir, {
    name: 'next-server',
    ca: 'ca',
    cn: 'localhost',
    extensions: 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n',
  });
  const f = (name: string) => path.join(dir, name);
  return {
    dir,
    caCert: f('ca.crt'),
    serverCert: f('server.crt'),
    serverKey: f('server.key'),
    clientCert: f('client.crt'),
    clientKey: f('client.key'),
    strangerCert: f('stranger.crt'),
    strangerKey: f('stranger.key'),
    meshClientCert: f('mesh-client.crt'),
    meshClientKey: f('mesh-client.key'),
    nextServerCert: f('next-server.crt'),
    nextServerKey: f('next-server.key'),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
