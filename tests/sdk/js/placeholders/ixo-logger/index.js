// Stands in for @ixo/logger, which @ixo/oracles-chain-client 2.1.2 depends on but imports only
// from modules (credentials, Matrix bot) that the client SDK's oracle hooks never load.
// Importing it is a bug in the test setup, so it fails loudly.
throw new Error("placeholder for @ixo/logger was imported; see tests/sdk/js/placeholders");
