import { InvalidRequestError } from '../../../src/limiter/errors';
import { validateDescriptor, validateRequest } from '../../../src/limiter/request-validation';
import { DEFAULT_REQUEST_LIMITS, type Descriptor, type RequestLimits } from '../../../src/limiter/types';

const LIMITS: RequestLimits = { maxDescriptors: 2, maxEntries: 2, maxKeyBytes: 6, maxValueBytes: 8 };
const d = (...pairs: [string, string][]): Descriptor => ({ entries: pairs.map(([key, value]) => ({ key, value })) });

/** The message validate() throws, or undefined when it accepts. */
function refusal(validate: () => void): string | undefined {
  try {
    validate();
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidRequestError);
    return (err as Error).message;
  }
}

describe('validateRequest', () => {
  it('accepts a domain with 1..maxDescriptors descriptors', () => {
    expect(refusal(() => validateRequest({ domain: 'edge', descriptors: [d(['a', '1']), d(['b', '2'])], hitsAddend: 0 }, LIMITS))).toBeUndefined();
  });

  it('refuses an empty domain, no descriptors, and more descriptors than the cap, naming the setting', () => {
    expect(refusal(() => validateRequest({ domain: '', descriptors: [d(['a', '1'])], hitsAddend: 0 }, LIMITS))).toBe('domain must not be empty');
    expect(refusal(() => validateRequest({ domain: 'edge', descriptors: [], hitsAddend: 0 }, LIMITS))).toBe('descriptors must not be empty');
    const three = [d(['a', '1']), d(['b', '2']), d(['c', '3'])];
    expect(refusal(() => validateRequest({ domain: 'edge', descriptors: three, hitsAddend: 0 }, LIMITS))).toBe(
      'descriptors: 3 descriptors, over the cap of 2 (REQUEST_MAX_DESCRIPTORS)',
    );
  });
});

describe('validateDescriptor', () => {
  it('accepts an entry with an empty value, as Envoy sends them', () => {
    expect(refusal(() => validateDescriptor(d(['key', '']), 0, LIMITS))).toBeUndefined();
  });

  it('refuses no entries, too many entries and an empty key, by path', () => {
    expect(refusal(() => validateDescriptor({ entries: [] }, 3, LIMITS))).toBe('descriptors[3]: entries must not be empty');
    expect(refusal(() => validateDescriptor(d(['a', '1'], ['b', '2'], ['c', '3']), 0, LIMITS))).toBe(
      'descriptors[0].entries: 3 entries, over the cap of 2 (DESCRIPTOR_MAX_ENTRIES)',
    );
    expect(refusal(() => validateDescriptor(d(['a', '1'], ['', '2']), 1, LIMITS))).toBe('descriptors[1].entries[1]: key must not be empty');
  });

  it('counts keys and values in UTF-8 bytes, never quoting them', () => {
    // 'é' takes 2 bytes, '€' 3, a surrogate pair 4 and a lone surrogate 3 (the replacement character).
    expect(refusal(() => validateDescriptor(d(['ééé', 'v']), 0, LIMITS))).toBeUndefined();
    expect(refusal(() => validateDescriptor(d(['éééé', 'v']), 0, LIMITS))).toBe(
      'descriptors[0].entries[0].key: 8 bytes, over the cap of 6 (DESCRIPTOR_MAX_KEY_BYTES)',
    );
    expect(refusal(() => validateDescriptor(d(['k', '😀😀']), 0, LIMITS))).toBeUndefined();
    expect(refusal(() => validateDescriptor(d(['k', '😀😀€']), 0, LIMITS))).toBe(
      'descriptors[0].entries[0].value: 11 bytes, over the cap of 8 (DESCRIPTOR_MAX_VALUE_BYTES)',
    );
    expect(refusal(() => validateDescriptor(d(['k', '\ud800\ud800\ud800']), 0, LIMITS))).toBe(
      'descriptors[0].entries[0].value: 9 bytes, over the cap of 8 (DESCRIPTOR_MAX_VALUE_BYTES)',
    );
  });

  it('refuses a limit override or hits_addend that is not a non-negative integer, and an unknown unit', () => {
    const over = (requestsPerUnit: number, unit = 'second'): Descriptor => ({ ...d(['a', '1']), limit: { requestsPerUnit, unit } as Descriptor['limit'] });
    expect(refusal(() => validateDescriptor(over(0), 0, DEFAULT_REQUEST_LIMITS))).toBeUndefined();
    expect(refusal(() => validateDescriptor(over(-1), 0, DEFAULT_REQUEST_LIMITS))).toBe(
      'descriptors[0].limit.requests_per_unit: expected a non-negative integer, got -1',
    );
    expect(refusal(() => validateDescriptor(over(1.5), 0, DEFAULT_REQUEST_LIMITS))).toMatch(/got 1.5$/);
    expect(refusal(() => validateDescriptor(over(1, 'fortnight'), 0, DEFAULT_REQUEST_LIMITS))).toBe('descriptors[0].limit.unit: unknown unit "fortnight"');
    expect(refusal(() => validateDescriptor({ ...d(['a', '1']), hitsAddend: -2 }, 2, DEFAULT_REQUEST_LIMITS))).toBe(
      'descriptors[2].hits_addend: expected a non-negative integer, got -2',
    );
    expect(refusal(() => validateDescriptor({ ...d(['a', '1']), hitsAddend: 0 }, 2, DEFAULT_REQUEST_LIMITS))).toBeUndefined();
  });
});
