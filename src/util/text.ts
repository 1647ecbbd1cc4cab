/** `1 route`, `2 routes`; `many` for a plural that is not `one` + s (`journal entries`). */
export const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;
