// Stands in for @ixo/did-provider-x, which @ixo/oracles-chain-client 2.1.2 depends on but imports only
// from modules (credentials, Matrix bot) that the client SDK's oracle hooks never load.
// Importing it is a bug in the test setup, so it fails loudly.
throw new Error("placeholder for @ixo/did-provider-x was imported; see tests/sdk/js/placeholders");
