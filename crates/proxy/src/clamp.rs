//! Exact ceiling: the call's estimate as a safe upper bound, the floor it can be clamped
//! down to, and, once reserved, the output bound written into the forwarded body when an
//! `exactCeiling` budget granted less than the whole estimate (or the request states no
//! bound the estimate can rely on).
//!
//! The bound (see [`Bound`]): no more prompt tokens than the prompt has bytes,
//! each at the highest price such a prompt can reach (the long-context tier only above
//! its threshold, a cache write's price only when the body can cause one), and output
//! at the highest output price of that tier, reasoning included. A call an `exactCeiling` budget admitted goes out
//! with an output bound of the most tokens its grant pays for after that prompt, so its
//! settled cost cannot pass the grant. What the bytes do not bound (images and other
//! non-text parts, provider-run tools billed per call) is refused on such a budget.

use actix_web::http::header::{HeaderName, HeaderValue};
use serde_json::json;

use super::admitted::Admitted;
use super::denial::{dollars, DENIED};
use super::reservation::Reservation;
use super::upstream::Route;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::Bound;
use spendgate_llm::usage::{self, Clamp};

/// The answer's header naming the output bound a clamped call was forwarded with.
pub const HEADER: HeaderName = HeaderName::from_static("x-service-clamped-output-tokens");

/// Bytes a clamp may add to a body (the longest inserted member,
/// `"generationConfig":{"maxOutputTokens":4294967295},`), counted in every prompt bound
/// so that it covers the body as forwarded.
const SPLICE_BYTES: usize = 64;

/// What a call is reserved for.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    bound: Bound,
    /// The output tokens the estimate counts.
    full_tokens: u32,
    /// The estimate: the prompt and `full_tokens` at their highest prices.
    pub estimate: i64,
    /// The least an `exactCeiling` budget may grant: the prompt and the minimum useful
    /// output. `None` when the call cannot be clamped (embeddings, or an output bound
    /// already at the minimum).
    pub floor: Option<i64>,
}

impl Plan {
    /// The call's bound: what each output bound costs at most after its prompt.
    pub fn bound(&self) -> Bound {
        self.bound
    }
}

/// The call's estimate and floor.
pub fn plan(state: &AppState, a: &Admitted) -> Plan {
    let price = a.price.unwrap_or_else(|| state.pricing.fallback_price(a.event_provider()));
    let prompt_bytes = a.summary.input_bytes.unwrap_or(a.body.len().saturating_add(SPLICE_BYTES));
    let bound = Bound::of(&price, prompt_bytes, usage::may_write_cache(a.route.format(), &a.body));
    let full_tokens = bound.output_tokens(&price, a.summary.max_output_tokens);
    let min_tokens = state.config.min_clamped_output_tokens;
    let floor = (a.route != Route::Embeddings && min_tokens < full_tokens).then(|| bound.cost(min_tokens));
    Plan { bound, full_tokens, estimate: bound.cost(full_tokens).max(1), floor }
}

/// Under an `exactCeiling` budget, bounds the call's cost by what is held: refuses what
/// the bound cannot cover, and writes the output bound the grant pays for into the body
/// when the request's own is absent or larger. Returns the bound written, if any.
pub fn apply(a: &mut Admitted, reservation: &Reservation, plan: &Plan) -> Result<Option<u32>, ApiError> {
    // Less than the estimate granted means an `exactCeiling` budget decided, even one
    // whose row changed before this instance's actor saw it.
    let exact = reservation.exact_ceiling() || reservation.granted() < plan.estimate;
    if !exact || a.route == Route::Embeddings {
        return Ok(None);
    }
    let format = a.route.format();
    if let Some(part) = usage::unbounded_part(format, &a.body) {
        return Err(refused(
            format!("The call has {part}, whose cost its size does not bound: a budget with exactCeiling admits text and client-side tools only"),
            json!({ "unbounded_part": part }),
        ));
    }
    let granted = reservation.granted();
    let n = plan.bound.tokens_for(granted).unwrap_or(0).min(plan.full_tokens);
    if a.summary.max_output_tokens.is_some_and(|asked| asked <= n) {
        return Ok(None);
    }
    match usage::set_output_bound(format, &a.body, &a.model, n) {
        Clamp::Body(body) => {
            a.body = body.into();
            a.summary.max_output_tokens = Some(n);
            Ok(Some(n))
        }
        Clamp::ThinkingTooLarge { budget_tokens } => Err(refused(
            format!(
                "The budget's room left ({}) pays for {n} output tokens, not more than the thinking budget of {budget_tokens}: send a smaller thinking.budget_tokens",
                dollars(granted)
            ),
            json!({ "clamped_output_tokens": n, "thinking_budget_tokens": budget_tokens }),
        )),
        Clamp::Unspliceable => Err(refused(
            "The request's output bound could not be set (escaped or repeated keys): send it plainly".to_owned(),
            json!({ "clamped_output_tokens": n }),
        )),
    }
}

/// The header value of a clamp.
pub fn header_value(n: u32) -> HeaderValue {
    HeaderValue::from(n)
}

fn refused(message: String, details: serde_json::Value) -> ApiError {
    ApiError::new(ErrorCode::InvalidInput, message).with_details(details).with_header(DENIED, "1")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use spendgate_llm::pricing::{Bound, ModelPrice, ROUNDING_SLACK};

    #[test]
    fn the_tokens_a_grant_pays_for_never_cost_more_than_it() {
        let price =
            ModelPrice { reasoning_output: Some(12_000_000), ..ModelPrice::new(1_250_000, 10_000_000) };
        let bound = Bound::of(&price, 3_000, false);
        for granted in [ROUNDING_SLACK + 4, 4_000, 4_001, 10_000, 77_777, 1_000_000] {
            match bound.tokens_for(granted) {
                Some(n) => {
                    assert!(bound.cost(n) <= granted, "{granted}");
                    assert!(bound.cost(n + 1) > granted, "{granted}");
                }
                None => assert!(bound.cost(0) > granted),
            }
        }
        // The prompt alone: 3,000 tokens at 1.25 $/M = 3,750 µ$, output at the reasoning price.
        assert_eq!(bound.cost(0), 3_750 + ROUNDING_SLACK);
        assert_eq!(bound.cost(100), 3_750 + 1_200 + ROUNDING_SLACK);
    }
}
