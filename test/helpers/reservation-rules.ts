/** The rules the reservation tests share: tokens per minute and per day on an API key, taking reservations; five calls in flight per tenant. */
export const RESERVATION_RULES = `
domain: llm
descriptors:
  - key: api_key
    reservations: true
    rate_limits:
      - {name: tokens_per_minute, unit: minute, requests_per_unit: 1000}
      - {name: tokens_per_day, unit: day, requests_per_unit: 100000}
  - key: tenant
    rate_limit: {name: in_flight, concurrency: 5}
`;
