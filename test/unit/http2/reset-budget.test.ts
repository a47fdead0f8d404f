import { ResetBudget } from '../../../src/http2/reset-budget';

describe('ResetBudget', () => {
  it('allows the burst at once and not one more', () => {
    const budget = new ResetBudget(1000, 33, 0);
    for (let i = 0; i < 1000; i++) expect(budget.spend(1, 0)).toBe(true);
    expect(budget.spend(1, 0)).toBe(false);
  });

  it('refills at its rate, never beyond the burst', () => {
    const budget = new ResetBudget(10, 2, 0);
    for (let i = 0; i < 10; i++) budget.spend(1, 0);
    // 1.5 s at 2 a second: 3 more.
    expect(budget.spend(3, 1500)).toBe(true);
    expect(budget.spend(1, 1500)).toBe(false);
    const rested = new ResetBudget(10, 2, 0);
    // An hour of rest still allows only the burst.
    expect(rested.spend(10, 3_600_000)).toBe(true);
    expect(rested.spend(1, 3_600_000)).toBe(false);
  });

  it('weighs a costly refusal as many resets', () => {
    const budget = new ResetBudget(1000, 33, 0);
    for (let i = 0; i < 10; i++) expect(budget.spend(100, 0)).toBe(true);
    expect(budget.spend(100, 0)).toBe(false);
  });

  it('a clock going backwards refills nothing', () => {
    const budget = new ResetBudget(2, 1000, 1000);
    budget.spend(2, 1000);
    expect(budget.spend(1, 0)).toBe(false);
  });
});
