// Jest runs specs in a VM context whose Symbol lacks what Node adds to the main realm's:
// `await using` in a spec needs Symbol.asyncDispose, which Node defines as this registered symbol.
const symbols = Symbol as { asyncDispose?: symbol };
symbols.asyncDispose ??= Symbol.for('nodejs.asyncDispose');
