//! What spendgate knows of the model providers' wire formats and prices, as pure code:
//! no networking, no database. The proxy reads usage out of answers with [`usage`]
//! (whole JSON bodies and server-sent-event streams, per provider) and charges it with
//! [`pricing`] (the price table, exact cost in microdollars, the unknown-model rule).

pub mod pricing;
pub mod usage;
