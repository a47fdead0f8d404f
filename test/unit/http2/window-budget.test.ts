import { WindowBudget } from '../../../src/http2/window-budget';

describe('WindowBudget', () => {
  it('lends what it has left, never more, and takes back what was lent', () => {
    const budget = new WindowBudget(1000);
    expect(budget.borrow(600)).toBe(600);
    expect(budget.borrow(600)).toBe(400);
    expect(budget.borrow(1)).toBe(0);
    expect(budget.lentBytes).toBe(1000);
    budget.giveBack(600);
    expect(budget.borrow(100)).toBe(100);
    expect(budget.lentBytes).toBe(500);
  });

  it('lends nothing when its limit is 0', () => {
    expect(new WindowBudget(0).borrow(65_536)).toBe(0);
  });
});
