/**
 * Who shares a limit through the store: quota streams' budgets (`rlqs`), leases among replicas
 * (`lease`), regions through the global store (`region`). Each kind keeps its own demand entries
 * (ReplicaExchange) and its own settlement ledgers (Settlements) on a counter, so that two kinds
 * sharing one counter never read each other's members or seqs.
 */
export type SharingKind = 'rlqs' | 'lease' | 'region';

export const SHARING_KINDS: readonly SharingKind[] = Object.freeze(['rlqs', 'lease', 'region']);
