//! Server-sent-event framing: events parsed incrementally from arbitrary chunks.

// ---------------------------------------------------------------------------------------
// Server-sent events
// ---------------------------------------------------------------------------------------

/// Largest event the parser keeps: an event whose data, or whose data plus the line still
/// being assembled, grows past this many bytes is dropped whole, so a misbehaving upstream
/// cannot make the proxy buffer without bound. The same bound as a whole JSON answer's:
/// a Responses stream's terminal event repeats the whole answer (every output item), and
/// it carries the usage, so dropping a smaller one would charge the call an estimate.
pub const MAX_SSE_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Capacity the data buffer shrinks back to after an unusually large event, so that one
/// big event does not pin memory for the rest of a long stream.
const RETAINED_BUFFER_BYTES: usize = 64 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched server-sent event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field; empty when the event had none (SSE's default type `message`)
    /// or it was not UTF-8.
    pub event: &'a str,
    /// The `data:` lines, joined with `\n`.
    pub data: &'a [u8],
}

impl SseEvent<'_> {
    /// Whether this is OpenAI's end-of-stream marker `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }
}

/// An incremental server-sent-events parser (WHATWG HTML, "event stream
/// interpretation") over bytes as they arrive: chunks may split anything, including a
/// UTF-8 character or a `\r\n` pair. Lines end with `\n`, `\r\n` or `\r`; `data:` lines
/// are joined with `\n`; comments (`:`), `id:`, `retry:` and unknown fields are ignored
/// (the proxy never reconnects); one leading space of a value is dropped; a leading BOM is
/// skipped. An event is dispatched at the blank line that ends it, only if it had data.
///
/// When an event lies within one chunk and has a single `data:` line, it is handed out as
/// a slice of the chunk; otherwise it is copied into a buffer that is reused, so the
/// parser does not allocate per event once warm.
#[derive(Debug)]
pub struct SseParser {
    /// A line whose end is not in the chunks seen so far.
    pub(super) partial_line: Vec<u8>,
    /// Data of the current event, when it is not just a slice of the current chunk.
    pub(super) data: Vec<u8>,
    event: String,
    has_data: bool,
    /// The previous chunk ended with `\r`: a `\n` starting the next one ends no line.
    after_cr: bool,
    /// Dropping the rest of an oversized line.
    skipping_line: bool,
    /// Dropping the current event, which grew past the limit.
    discarding_event: bool,
    at_stream_start: bool,
    dropped_events: u64,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

/// Byte range of the current event's data inside the chunk being parsed.
type ChunkSpan = Option<(usize, usize)>;

impl SseParser {
    /// A parser that drops events over [`MAX_SSE_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_max_event_bytes(MAX_SSE_EVENT_BYTES)
    }

    /// A parser with another event-size limit.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        SseParser {
            partial_line: Vec::new(),
            data: Vec::new(),
            event: String::new(),
            has_data: false,
            after_cr: false,
            skipping_line: false,
            discarding_event: false,
            at_stream_start: true,
            dropped_events: 0,
            max_event_bytes,
        }
    }

    /// Events dropped so far for exceeding the size limit.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Parses the next chunk of the stream, calling `on_event` for every event it
    /// completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut pos = 0;
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                pos = 1;
            }
        }
        let mut span: ChunkSpan = None;
        let mut unterminated = None;
        while pos < chunk.len() {
            let Some(len) = chunk[pos..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                unterminated = Some(pos);
                break;
            };
            let end = pos + len;
            if self.skipping_line {
                self.skipping_line = false;
            } else if self.partial_line.is_empty() {
                self.process_line(&chunk[pos..end], Some(pos), chunk, &mut span, &mut on_event);
            } else if self.partial_line.len() + len + self.pending_len(span) > self.max_event_bytes {
                self.partial_line.clear();
                self.discard_event(&mut span);
            } else {
                self.partial_line.extend_from_slice(&chunk[pos..end]);
                let line = std::mem::take(&mut self.partial_line);
                self.process_line(&line, None, chunk, &mut span, &mut on_event);
                self.partial_line = line;
                self.partial_line.clear();
            }
            pos = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(pos) {
                    Some(b'\n') => pos += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        // The chunk is about to go away: keep what the unfinished event still needs.
        if let Some((start, end)) = span {
            self.data.extend_from_slice(&chunk[start..end]);
        }
        if let Some(start) = unterminated {
            self.keep_partial_line(&chunk[start..]);
        }
    }

    /// Ends the stream: an event still open (its last line ended but no blank line
    /// followed, or even its last line unterminated) is dispatched, unlike the SSE
    /// specification, which discards it, because it may be the one carrying usage. A
    /// truncated JSON payload then simply fails to parse. The parser is ready for a new
    /// stream afterwards.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut span: ChunkSpan = None;
        if !self.skipping_line && !self.partial_line.is_empty() {
            let line = std::mem::take(&mut self.partial_line);
            self.process_line(&line, None, &[], &mut span, &mut on_event);
            self.partial_line = line;
        }
        self.dispatch(&[], &mut span, &mut on_event);
        self.partial_line.clear();
        self.after_cr = false;
        self.skipping_line = false;
        self.at_stream_start = true;
    }

    /// Bytes the current event holds so far.
    fn pending_len(&self, span: ChunkSpan) -> usize {
        self.data.len() + span.map_or(0, |(start, end)| end - start)
    }

    fn keep_partial_line(&mut self, rest: &[u8]) {
        if self.skipping_line {
            return;
        }
        if self.partial_line.len() + rest.len() + self.data.len() > self.max_event_bytes {
            self.partial_line.clear();
            self.skipping_line = true;
            self.discard_event(&mut None);
            return;
        }
        self.partial_line.extend_from_slice(rest);
    }

    /// Processes one complete line. `line_start` is its offset in `chunk` when the line
    /// lies in the chunk, so that its data can be handed out without a copy.
    fn process_line(
        &mut self,
        line: &[u8],
        line_start: Option<usize>,
        chunk: &[u8],
        span: &mut ChunkSpan,
        on_event: &mut impl FnMut(SseEvent<'_>),
    ) {
        let (mut line, mut line_start) = (line, line_start);
        if self.at_stream_start {
            self.at_stream_start = false;
            if let Some(rest) = line.strip_prefix(UTF8_BOM) {
                line = rest;
                line_start = line_start.map(|start| start + UTF8_BOM.len());
            }
        }
        let Some(&first) = line.first() else {
            self.dispatch(chunk, span, on_event);
            return;
        };
        if self.discarding_event || first == b':' {
            return;
        }
        let (field, value_offset) = match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], colon + 1 + usize::from(line.get(colon + 1) == Some(&b' '))),
            None => (line, line.len()),
        };
        let value = &line[value_offset..];
        match field {
            b"data" => {
                let value_span = line_start.map(|start| (start + value_offset, start + line.len()));
                self.push_data(value, value_span, chunk, span);
            }
            b"event" => {
                self.event.clear();
                if let Ok(name) = std::str::from_utf8(value) {
                    self.event.push_str(name);
                }
            }
            _ => {}
        }
    }

    fn push_data(&mut self, value: &[u8], value_span: ChunkSpan, chunk: &[u8], span: &mut ChunkSpan) {
        if self.pending_len(*span) + 1 + value.len() > self.max_event_bytes {
            self.discard_event(span);
            return;
        }
        if !self.has_data {
            self.has_data = true;
            match value_span {
                Some(value_span) => *span = Some(value_span),
                None => self.data.extend_from_slice(value),
            }
            return;
        }
        // A second data line: the event can no longer be a single slice of the chunk.
        if let Some((start, end)) = span.take() {
            self.data.extend_from_slice(&chunk[start..end]);
        }
        self.data.push(b'\n');
        self.data.extend_from_slice(value);
    }

    fn dispatch(&mut self, chunk: &[u8], span: &mut ChunkSpan, on_event: &mut impl FnMut(SseEvent<'_>)) {
        if self.discarding_event {
            self.dropped_events += 1;
        } else if self.has_data {
            let data = match *span {
                Some((start, end)) => &chunk[start..end],
                None => &self.data[..],
            };
            on_event(SseEvent { event: &self.event, data });
        }
        *span = None;
        self.data.clear();
        if self.data.capacity() > RETAINED_BUFFER_BYTES * 16 {
            self.data.shrink_to(RETAINED_BUFFER_BYTES);
        }
        self.event.clear();
        self.has_data = false;
        self.discarding_event = false;
    }

    fn discard_event(&mut self, span: &mut ChunkSpan) {
        self.discarding_event = true;
        self.has_data = false;
        self.data.clear();
        *span = None;
    }
}
