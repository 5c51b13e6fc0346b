//! yaml.v3's emitter (go-yaml's port of libyaml's `emitterc.c`), reduced to what `Marshal`
//! produces: one implicit document of block collections, empty `[]`/`{}` flow collections and
//! untagged scalars (plus `!!binary`).
//!
//! Output bytes depend on the emitter's state machine in detail: the indentation rule go-yaml
//! changed from libyaml (mappings align to multiples of the indent, sequences inside
//! sequences skip the `- `), scalar analysis that picks plain/single/double/literal style, and
//! how breaks and indentation are written. The functions below keep libyaml's structure and
//! names so that each can be checked against the original.

/// The presentation style requested for a scalar.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ScalarStyle {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
}

/// An emitter event.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event<'a> {
    StreamStart,
    DocumentStart,
    DocumentEnd,
    StreamEnd,
    /// A scalar; `binary` adds the `!!binary` tag (the event is then not implicit).
    Scalar {
        value: &'a [u8],
        style: ScalarStyle,
        binary: bool,
    },
    /// `empty` tells whether the matching end event follows immediately (libyaml looks ahead).
    SequenceStart {
        empty: bool,
    },
    SequenceEnd,
    MappingStart {
        empty: bool,
    },
    MappingEnd,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    StreamStart,
    FirstDocumentStart,
    DocumentStart,
    DocumentContent,
    DocumentEnd,
    FlowSequenceFirstItem,
    FlowSequenceItem,
    FlowMappingFirstKey,
    FlowMappingKey,
    FlowMappingSimpleValue,
    FlowMappingValue,
    BlockSequenceFirstItem,
    BlockSequenceItem,
    BlockMappingFirstKey,
    BlockMappingKey,
    BlockMappingSimpleValue,
    BlockMappingValue,
    End,
}

/// The emitter got an event its state does not accept (a bug in the caller).
#[derive(Debug)]
pub(crate) struct EmitterError(pub(crate) &'static str);

#[derive(Default)]
struct ScalarAnalysis {
    multiline: bool,
    flow_plain_allowed: bool,
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
    style: Option<ScalarStyle>,
}

/// The emitter state. Columns count runes, as go-yaml does.
pub(crate) struct Emitter {
    out: Vec<u8>,
    best_indent: i32,
    best_width: i32,
    state: State,
    states: Vec<State>,
    indent: i32,
    indents: Vec<i32>,
    flow_level: i32,
    root_context: bool,
    simple_key_context: bool,
    column: i32,
    whitespace: bool,
    indention: bool,
    open_ended: bool,
    /// The `!!binary` tag of the current scalar event.
    tagged: bool,
    scalar: ScalarAnalysis,
    scalar_is_empty: bool,
}

type Result = std::result::Result<(), EmitterError>;

impl Emitter {
    /// An emitter with yaml.v3's settings: indentation 4, unlimited width, Unicode output.
    pub(crate) fn new(out: Vec<u8>) -> Emitter {
        Emitter {
            out,
            best_indent: 4,
            best_width: i32::MAX,
            state: State::StreamStart,
            states: Vec::with_capacity(16),
            indent: -1,
            indents: Vec::with_capacity(16),
            flow_level: 0,
            root_context: false,
            simple_key_context: false,
            column: 0,
            whitespace: true,
            indention: true,
            open_ended: false,
            tagged: false,
            scalar: ScalarAnalysis::default(),
            scalar_is_empty: false,
        }
    }

    /// The output so far.
    pub(crate) fn into_output(self) -> Vec<u8> {
        self.out
    }

    /// go-yaml's `finish`: the encoder clears `open_ended` before the stream end, so no
    /// `...` marker is written.
    pub(crate) fn clear_open_ended(&mut self) {
        self.open_ended = false;
    }

    /// Emits one event. Events arrive one at a time; the look-ahead libyaml needs (is a
    /// collection empty?) travels in the start events.
    pub(crate) fn emit(&mut self, event: Event<'_>) -> Result {
        self.analyze_event(&event);
        self.state_machine(&event)
    }

    fn state_machine(&mut self, event: &Event<'_>) -> Result {
        match self.state {
            State::StreamStart => self.emit_stream_start(event),
            State::FirstDocumentStart => self.emit_document_start(event, true),
            State::DocumentStart => self.emit_document_start(event, false),
            State::DocumentContent => self.emit_document_content(event),
            State::DocumentEnd => self.emit_document_end(event),
            State::FlowSequenceFirstItem => self.emit_flow_sequence_item(event, true),
            State::FlowSequenceItem => self.emit_flow_sequence_item(event, false),
            State::FlowMappingFirstKey => self.emit_flow_mapping_key(event, true),
            State::FlowMappingKey => self.emit_flow_mapping_key(event, false),
            State::FlowMappingSimpleValue => self.emit_flow_mapping_value(event, true),
            State::FlowMappingValue => self.emit_flow_mapping_value(event, false),
            State::BlockSequenceFirstItem => self.emit_block_sequence_item(event, true),
            State::BlockSequenceItem => self.emit_block_sequence_item(event, false),
            State::BlockMappingFirstKey => self.emit_block_mapping_key(event, true),
            State::BlockMappingKey => self.emit_block_mapping_key(event, false),
            State::BlockMappingSimpleValue => self.emit_block_mapping_value(event, true),
            State::BlockMappingValue => self.emit_block_mapping_value(event, false),
            State::End => Err(EmitterError("expected nothing after STREAM-END")),
        }
    }

    fn pop_state(&mut self) {
        self.state = self.states.pop().unwrap_or(State::End);
    }

    fn pop_indent(&mut self) {
        self.indent = self.indents.pop().unwrap_or(-1);
    }

    fn emit_stream_start(&mut self, event: &Event<'_>) -> Result {
        if !matches!(event, Event::StreamStart) {
            return Err(EmitterError("expected STREAM-START"));
        }
        self.indent = -1;
        self.column = 0;
        self.whitespace = true;
        self.indention = true;
        self.state = State::FirstDocumentStart;
        Ok(())
    }

    fn emit_document_start(&mut self, event: &Event<'_>, first: bool) -> Result {
        match event {
            Event::DocumentStart => {
                if !first {
                    self.write_indent();
                    self.write_indicator(b"---", true, false, false);
                    self.write_indent();
                }
                self.state = State::DocumentContent;
                Ok(())
            }
            Event::StreamEnd => {
                if self.open_ended {
                    self.write_indicator(b"...", true, false, false);
                    self.write_indent();
                }
                self.state = State::End;
                Ok(())
            }
            _ => Err(EmitterError("expected DOCUMENT-START or STREAM-END")),
        }
    }

    fn emit_document_content(&mut self, event: &Event<'_>) -> Result {
        self.states.push(State::DocumentEnd);
        self.emit_node(event, true, false)
    }

    fn emit_document_end(&mut self, event: &Event<'_>) -> Result {
        if !matches!(event, Event::DocumentEnd) {
            return Err(EmitterError("expected DOCUMENT-END"));
        }
        self.write_indent();
        self.state = State::DocumentStart;
        Ok(())
    }

    fn emit_flow_sequence_item(&mut self, event: &Event<'_>, first: bool) -> Result {
        if first {
            self.write_indicator(b"[", true, true, false);
            self.increase_indent(true, false);
            self.flow_level += 1;
        }
        if matches!(event, Event::SequenceEnd) {
            self.flow_level -= 1;
            self.pop_indent();
            if self.column == 0 {
                self.write_indent();
            }
            self.write_indicator(b"]", false, false, false);
            self.pop_state();
            return Ok(());
        }
        if !first {
            self.write_indicator(b",", false, false, false);
        }
        if self.column == 0 || self.column > self.best_width {
            self.write_indent();
        }
        self.states.push(State::FlowSequenceItem);
        self.emit_node(event, false, false)
    }

    fn emit_flow_mapping_key(&mut self, event: &Event<'_>, first: bool) -> Result {
        if first {
            self.write_indicator(b"{", true, true, false);
            self.increase_indent(true, false);
            self.flow_level += 1;
        }
        if matches!(event, Event::MappingEnd) {
            self.flow_level -= 1;
            self.pop_indent();
            self.write_indicator(b"}", false, false, false);
            self.pop_state();
            return Ok(());
        }
        if !first {
            self.write_indicator(b",", false, false, false);
        }
        if self.column == 0 || self.column > self.best_width {
            self.write_indent();
        }
        if self.check_simple_key(event) {
            self.states.push(State::FlowMappingSimpleValue);
            return self.emit_node(event, false, true);
        }
        self.write_indicator(b"?", true, false, false);
        self.states.push(State::FlowMappingValue);
        self.emit_node(event, false, false)
    }

    fn emit_flow_mapping_value(&mut self, event: &Event<'_>, simple: bool) -> Result {
        if simple {
            self.write_indicator(b":", false, false, false);
        } else {
            if self.column > self.best_width {
                self.write_indent();
            }
            self.write_indicator(b":", true, false, false);
        }
        self.states.push(State::FlowMappingKey);
        self.emit_node(event, false, false)
    }

    fn emit_block_sequence_item(&mut self, event: &Event<'_>, first: bool) -> Result {
        if first {
            self.increase_indent(false, false);
        }
        if matches!(event, Event::SequenceEnd) {
            self.pop_indent();
            self.pop_state();
            return Ok(());
        }
        self.write_indent();
        self.write_indicator(b"-", true, false, true);
        self.states.push(State::BlockSequenceItem);
        self.emit_node(event, false, false)
    }

    fn emit_block_mapping_key(&mut self, event: &Event<'_>, first: bool) -> Result {
        if first {
            self.increase_indent(false, false);
        }
        if matches!(event, Event::MappingEnd) {
            self.pop_indent();
            self.pop_state();
            return Ok(());
        }
        self.write_indent();
        if self.check_simple_key(event) {
            self.states.push(State::BlockMappingSimpleValue);
            return self.emit_node(event, false, true);
        }
        self.write_indicator(b"?", true, false, true);
        self.states.push(State::BlockMappingValue);
        self.emit_node(event, false, false)
    }

    fn emit_block_mapping_value(&mut self, event: &Event<'_>, simple: bool) -> Result {
        if simple {
            self.write_indicator(b":", false, false, false);
        } else {
            self.write_indent();
            self.write_indicator(b":", true, false, true);
        }
        self.states.push(State::BlockMappingKey);
        self.emit_node(event, false, false)
    }

    fn emit_node(&mut self, event: &Event<'_>, root: bool, simple_key: bool) -> Result {
        self.root_context = root;
        self.simple_key_context = simple_key;
        match *event {
            Event::Scalar { value, .. } => self.emit_scalar(value),
            Event::SequenceStart { empty } => {
                self.state = if self.flow_level > 0 || empty {
                    State::FlowSequenceFirstItem
                } else {
                    State::BlockSequenceFirstItem
                };
                Ok(())
            }
            Event::MappingStart { empty } => {
                self.state = if self.flow_level > 0 || empty {
                    State::FlowMappingFirstKey
                } else {
                    State::BlockMappingFirstKey
                };
                Ok(())
            }
            _ => Err(EmitterError(
                "expected SCALAR, SEQUENCE-START, MAPPING-START, or ALIAS",
            )),
        }
    }

    fn emit_scalar(&mut self, value: &[u8]) -> Result {
        let style = self.select_scalar_style();
        if self.tagged {
            self.write_tag_handle(b"!!");
            self.write_tag_content(b"binary");
        }
        self.increase_indent(true, false);
        match style {
            ScalarStyle::Plain => self.write_plain_scalar(value),
            ScalarStyle::SingleQuoted => self.write_single_quoted_scalar(value),
            ScalarStyle::DoubleQuoted => self.write_double_quoted_scalar(value),
            ScalarStyle::Literal => self.write_literal_scalar(value),
        }
        self.pop_indent();
        self.pop_state();
        Ok(())
    }

    /// go-yaml's `yaml_emitter_increase_indent`: the first level is 0 (or the indent for flow
    /// content); inside a block sequence item the content skips the `- `; everything else
    /// moves to the next multiple of the indent.
    fn increase_indent(&mut self, flow: bool, indentless: bool) {
        self.indents.push(self.indent);
        if self.indent < 0 {
            self.indent = if flow { self.best_indent } else { 0 };
        } else if !indentless {
            if self.states.last() == Some(&State::BlockSequenceItem) {
                self.indent += 2;
            } else {
                self.indent = self.best_indent * ((self.indent + self.best_indent) / self.best_indent);
            }
        }
    }

    fn check_simple_key(&self, event: &Event<'_>) -> bool {
        match *event {
            Event::Scalar { value, .. } => {
                if self.scalar.multiline {
                    return false;
                }
                let tag_len = if self.tagged { 2 + 6 } else { 0 };
                tag_len + value.len() <= 128
            }
            Event::SequenceStart { empty } | Event::MappingStart { empty } => empty,
            _ => false,
        }
    }

    fn select_scalar_style(&mut self) -> ScalarStyle {
        let mut style = self.scalar.style.unwrap_or(ScalarStyle::Plain);
        if self.simple_key_context && self.scalar.multiline {
            style = ScalarStyle::DoubleQuoted;
        }
        let empty = self.scalar_is_empty;
        if style == ScalarStyle::Plain {
            if self.flow_level > 0 && !self.scalar.flow_plain_allowed
                || self.flow_level == 0 && !self.scalar.block_plain_allowed
            {
                style = ScalarStyle::SingleQuoted;
            }
            if empty && (self.flow_level > 0 || self.simple_key_context) {
                style = ScalarStyle::SingleQuoted;
            }
        }
        if style == ScalarStyle::SingleQuoted && !self.scalar.single_quoted_allowed {
            style = ScalarStyle::DoubleQuoted;
        }
        if style == ScalarStyle::Literal
            && (!self.scalar.block_allowed || self.flow_level > 0 || self.simple_key_context)
        {
            style = ScalarStyle::DoubleQuoted;
        }
        style
    }

    fn analyze_event(&mut self, event: &Event<'_>) {
        if let Event::Scalar { value, style, binary } = *event {
            self.tagged = binary;
            self.analyze_scalar(value);
            self.scalar.style = Some(style);
            self.scalar_is_empty = value.is_empty();
        } else {
            self.tagged = false;
        }
    }

    /// `yaml_emitter_analyze_scalar`: which styles can represent the value.
    fn analyze_scalar(&mut self, value: &[u8]) {
        let s = &mut self.scalar;
        if value.is_empty() {
            s.multiline = false;
            s.flow_plain_allowed = false;
            s.block_plain_allowed = true;
            s.single_quoted_allowed = true;
            s.block_allowed = false;
            return;
        }
        if is_simple_text(value) {
            // Nothing to analyse: every style can represent it.
            s.multiline = false;
            s.flow_plain_allowed = true;
            s.block_plain_allowed = true;
            s.single_quoted_allowed = true;
            s.block_allowed = true;
            return;
        }
        let mut block_indicators = false;
        let mut flow_indicators = false;
        let mut line_breaks = false;
        let mut special_characters = false;
        let mut tab_characters = false;
        let mut leading_space = false;
        let mut leading_break = false;
        let mut trailing_space = false;
        let mut trailing_break = false;
        let mut break_space = false;
        let mut space_break = false;
        let mut previous_space = false;
        let mut previous_break = false;

        if value.starts_with(b"---") || value.starts_with(b"...") {
            block_indicators = true;
            flow_indicators = true;
        }
        let mut preceded_by_whitespace = true;
        let mut i = 0;
        while i < value.len() {
            let w = width(value[i]).max(1);
            let followed_by_whitespace = i + w >= value.len() || is_blank(value, i + w);
            let c = value[i];
            if i == 0 {
                match c {
                    b'#' | b',' | b'[' | b']' | b'{' | b'}' | b'&' | b'*' | b'!' | b'|' | b'>' | b'\''
                    | b'"' | b'%' | b'@' | b'`' => {
                        flow_indicators = true;
                        block_indicators = true;
                    }
                    b'?' | b':' => {
                        flow_indicators = true;
                        if followed_by_whitespace {
                            block_indicators = true;
                        }
                    }
                    b'-' if followed_by_whitespace => {
                        flow_indicators = true;
                        block_indicators = true;
                    }
                    _ => {}
                }
            } else {
                match c {
                    b',' | b'?' | b'[' | b']' | b'{' | b'}' => flow_indicators = true,
                    b':' => {
                        flow_indicators = true;
                        if followed_by_whitespace {
                            block_indicators = true;
                        }
                    }
                    b'#' if preceded_by_whitespace => {
                        flow_indicators = true;
                        block_indicators = true;
                    }
                    _ => {}
                }
            }
            if c == b'\t' {
                tab_characters = true;
            } else if !is_printable(value, i) {
                special_characters = true;
            }
            if c == b' ' {
                if i == 0 {
                    leading_space = true;
                }
                if i + w == value.len() {
                    trailing_space = true;
                }
                if previous_break {
                    break_space = true;
                }
                previous_space = true;
                previous_break = false;
            } else if is_break(value, i) {
                line_breaks = true;
                if i == 0 {
                    leading_break = true;
                }
                if i + w == value.len() {
                    trailing_break = true;
                }
                if previous_space {
                    space_break = true;
                }
                previous_space = false;
                previous_break = true;
            } else {
                previous_space = false;
                previous_break = false;
            }
            preceded_by_whitespace = is_blankz(value, i);
            i += w;
        }

        s.multiline = line_breaks;
        s.flow_plain_allowed = true;
        s.block_plain_allowed = true;
        s.single_quoted_allowed = true;
        s.block_allowed = true;
        if leading_space || leading_break || trailing_space || trailing_break {
            s.flow_plain_allowed = false;
            s.block_plain_allowed = false;
        }
        if trailing_space {
            s.block_allowed = false;
        }
        if break_space {
            s.flow_plain_allowed = false;
            s.block_plain_allowed = false;
            s.single_quoted_allowed = false;
        }
        if space_break || tab_characters || special_characters {
            s.flow_plain_allowed = false;
            s.block_plain_allowed = false;
            s.single_quoted_allowed = false;
        }
        if space_break || special_characters {
            s.block_allowed = false;
        }
        if line_breaks {
            s.flow_plain_allowed = false;
            s.block_plain_allowed = false;
        }
        if flow_indicators {
            s.flow_plain_allowed = false;
        }
        if block_indicators {
            s.block_plain_allowed = false;
        }
    }

    // ---- Writers -------------------------------------------------------------------------

    fn put(&mut self, c: u8) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push(b'\n');
        self.column = 0;
        self.indention = true;
    }

    /// Copies one UTF-8 character and advances `i`.
    fn write(&mut self, value: &[u8], i: &mut usize) {
        let w = width(value[*i]).max(1).min(value.len() - *i);
        self.out.extend_from_slice(&value[*i..*i + w]);
        self.column += 1;
        *i += w;
    }

    fn write_all(&mut self, value: &[u8]) {
        let mut i = 0;
        while i < value.len() {
            self.write(value, &mut i);
        }
    }

    fn write_break(&mut self, value: &[u8], i: &mut usize) {
        if value[*i] == b'\n' {
            self.put_break();
            *i += 1;
        } else {
            self.write(value, i);
            self.column = 0;
            self.indention = true;
        }
    }

    fn write_indent(&mut self) {
        let indent = self.indent.max(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(b' ');
        }
        self.whitespace = true;
    }

    fn write_indicator(
        &mut self,
        indicator: &[u8],
        need_whitespace: bool,
        is_whitespace: bool,
        is_indention: bool,
    ) {
        if need_whitespace && !self.whitespace {
            self.put(b' ');
        }
        self.write_all(indicator);
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
        self.open_ended = false;
    }

    fn write_tag_handle(&mut self, value: &[u8]) {
        if !self.whitespace {
            self.put(b' ');
        }
        self.write_all(value);
        self.whitespace = false;
        self.indention = false;
    }

    /// The suffix of the only tag the encoder writes (`binary`), all URI-safe characters.
    fn write_tag_content(&mut self, value: &[u8]) {
        self.write_all(value);
        self.whitespace = false;
        self.indention = false;
    }

    /// Appends text without line breaks in one piece; the column advances by its runes.
    fn write_run(&mut self, text: &[u8]) {
        self.out.extend_from_slice(text);
        self.column += text.iter().filter(|&&b| b & 0xC0 != 0x80).count() as i32;
    }

    fn write_plain_scalar(&mut self, value: &[u8]) {
        if !value.is_empty() && !self.whitespace {
            self.put(b' ');
        }
        if !has_break(value) {
            self.write_run(value);
            if !value.is_empty() {
                self.whitespace = false;
            }
            self.indention = false;
            if self.root_context {
                self.open_ended = true;
            }
            return;
        }
        let mut breaks = false;
        let mut i = 0;
        while i < value.len() {
            if value[i] == b' ' {
                self.write(value, &mut i);
            } else if is_break(value, i) {
                if !breaks && value[i] == b'\n' {
                    self.put_break();
                }
                self.write_break(value, &mut i);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                self.write(value, &mut i);
                self.indention = false;
                breaks = false;
            }
        }
        if !value.is_empty() {
            self.whitespace = false;
        }
        self.indention = false;
        if self.root_context {
            self.open_ended = true;
        }
    }

    fn write_single_quoted_scalar(&mut self, value: &[u8]) {
        self.write_indicator(b"'", true, false, false);
        if !has_break(value) {
            for part in value.split_inclusive(|&b| b == b'\'') {
                self.write_run(part);
                if part.last() == Some(&b'\'') {
                    self.put(b'\'');
                }
            }
            if !value.is_empty() {
                self.indention = false;
            }
            self.write_indicator(b"'", false, false, false);
            self.whitespace = false;
            self.indention = false;
            return;
        }
        let mut breaks = false;
        let mut i = 0;
        while i < value.len() {
            if value[i] == b' ' {
                self.write(value, &mut i);
            } else if is_break(value, i) {
                if !breaks && value[i] == b'\n' {
                    self.put_break();
                }
                self.write_break(value, &mut i);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                if value[i] == b'\'' {
                    self.put(b'\'');
                }
                self.write(value, &mut i);
                self.indention = false;
                breaks = false;
            }
        }
        self.write_indicator(b"'", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_double_quoted_scalar(&mut self, value: &[u8]) {
        self.write_indicator(b"\"", true, false, false);
        let mut i = 0;
        while i < value.len() {
            let c = value[i];
            if !is_printable(value, i) || is_bom(value, i) || is_break(value, i) || c == b'"' || c == b'\\' {
                let w = width(c).max(1).min(value.len() - i);
                let mut v: u32 = match w {
                    1 => u32::from(c & 0x7F),
                    2 => u32::from(c & 0x1F),
                    3 => u32::from(c & 0x0F),
                    _ => u32::from(c & 0x07),
                };
                for k in 1..w {
                    v = (v << 6) + u32::from(value[i + k] & 0x3F);
                }
                i += w;
                self.put(b'\\');
                match v {
                    0x00 => self.put(b'0'),
                    0x07 => self.put(b'a'),
                    0x08 => self.put(b'b'),
                    0x09 => self.put(b't'),
                    0x0A => self.put(b'n'),
                    0x0B => self.put(b'v'),
                    0x0C => self.put(b'f'),
                    0x0D => self.put(b'r'),
                    0x1B => self.put(b'e'),
                    0x22 => self.put(b'"'),
                    0x5C => self.put(b'\\'),
                    0x85 => self.put(b'N'),
                    0xA0 => self.put(b'_'),
                    0x2028 => self.put(b'L'),
                    0x2029 => self.put(b'P'),
                    _ => {
                        let (letter, digits) = if v <= 0xFF {
                            (b'x', 2)
                        } else if v <= 0xFFFF {
                            (b'u', 4)
                        } else {
                            (b'U', 8)
                        };
                        self.put(letter);
                        for k in (0..digits).rev() {
                            let digit = ((v >> (k * 4)) & 0x0F) as u8;
                            self.put(if digit < 10 {
                                b'0' + digit
                            } else {
                                b'A' + digit - 10
                            });
                        }
                    }
                }
            } else {
                // A run of characters that need no escape.
                let start = i;
                i += 1;
                while i < value.len() && value[i] & 0xC0 == 0x80 {
                    i += 1;
                }
                while let Some(&c) = value.get(i) {
                    if c == b' ' || (c.is_ascii_graphic() && c != b'"' && c != b'\\') {
                        i += 1;
                    } else {
                        break;
                    }
                }
                self.write_run(&value[start..i]);
            }
        }
        self.write_indicator(b"\"", false, false, false);
        self.whitespace = false;
        self.indention = false;
    }

    fn write_block_scalar_hints(&mut self, value: &[u8]) {
        if value.first() == Some(&b' ') || is_break(value, 0) {
            let hint = [b'0' + self.best_indent as u8];
            self.write_indicator(&hint, false, false, false);
        }
        self.open_ended = false;
        let mut chomp = None;
        if value.is_empty() {
            chomp = Some(b'-');
        } else {
            let mut i = value.len() - 1;
            while i > 0 && value[i] & 0xC0 == 0x80 {
                i -= 1;
            }
            if !is_break(value, i) {
                chomp = Some(b'-');
            } else if i == 0 {
                chomp = Some(b'+');
                self.open_ended = true;
            } else {
                i -= 1;
                while i > 0 && value[i] & 0xC0 == 0x80 {
                    i -= 1;
                }
                if is_break(value, i) {
                    chomp = Some(b'+');
                    self.open_ended = true;
                }
            }
        }
        if let Some(c) = chomp {
            self.write_indicator(&[c], false, false, false);
        }
    }

    /// yaml.v3 3.0.1 writes no line break after the header itself: the first content line
    /// starts with `write_indent`, so a value that starts with a line break loses it.
    fn write_literal_scalar(&mut self, value: &[u8]) {
        self.write_indicator(b"|", true, false, false);
        self.write_block_scalar_hints(value);
        self.whitespace = true;
        let mut breaks = true;
        let mut i = 0;
        while i < value.len() {
            if is_break(value, i) {
                self.write_break(value, &mut i);
                breaks = true;
            } else {
                if breaks {
                    self.write_indent();
                }
                // Continuation bytes are never breaks, so this stops at character boundaries.
                let start = i;
                while i < value.len() && !is_break(value, i) {
                    i += 1;
                }
                self.write_run(&value[start..i]);
                self.indention = false;
                breaks = false;
            }
        }
    }
}

/// The byte length of the UTF-8 sequence starting with `b` (0 for a continuation byte).
fn width(b: u8) -> usize {
    if b & 0x80 == 0 {
        1
    } else if b & 0xE0 == 0xC0 {
        2
    } else if b & 0xF0 == 0xE0 {
        3
    } else if b & 0xF8 == 0xF0 {
        4
    } else {
        0
    }
}

/// A fast path of `analyze_scalar`: text of letters, digits, `_`, `.`, `/`, `-` and inner
/// single spaces, starting with a letter, digit, `_` or `/`, has no indicator, break, special
/// character or leading/trailing space, so the full analysis would allow every style.
fn is_simple_text(b: &[u8]) -> bool {
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return false;
    };
    (first.is_ascii_alphanumeric() || first == b'_' || first == b'/')
        && last != b' '
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-' | b' '))
}

/// Whether the text contains a line break of any kind (`\n`, `\r`, NEL, LS, PS).
fn has_break(b: &[u8]) -> bool {
    b.iter()
        .enumerate()
        .any(|(i, &c)| matches!(c, b'\n' | b'\r' | 0xC2 | 0xE2) && is_break(b, i))
}

fn at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

fn is_blank(b: &[u8], i: usize) -> bool {
    matches!(at(b, i), b' ' | b'\t')
}

fn is_break(b: &[u8], i: usize) -> bool {
    match at(b, i) {
        b'\r' | b'\n' => true,
        0xC2 => at(b, i + 1) == 0x85,
        0xE2 => at(b, i + 1) == 0x80 && matches!(at(b, i + 2), 0xA8 | 0xA9),
        _ => false,
    }
}

/// Blank, break or NUL (libyaml's `IS_BLANKZ`).
fn is_blankz(b: &[u8], i: usize) -> bool {
    is_blank(b, i) || is_break(b, i) || at(b, i) == 0
}

fn is_bom(b: &[u8], i: usize) -> bool {
    at(b, i) == 0xEF && at(b, i + 1) == 0xBB && at(b, i + 2) == 0xBF
}

/// libyaml's `IS_PRINTABLE`: `\n`, printable ASCII and the printable BMP ranges. Characters
/// outside the BMP (emoji) are not "printable" and end up escaped as `\UXXXXXXXX`.
fn is_printable(b: &[u8], i: usize) -> bool {
    let c = at(b, i);
    c == 0x0A
        || (0x20..=0x7E).contains(&c)
        || (c == 0xC2 && at(b, i + 1) >= 0xA0)
        || (c > 0xC2 && c < 0xED)
        || (c == 0xED && at(b, i + 1) < 0xA0)
        || c == 0xEE
        || (c == 0xEF
            && !(at(b, i + 1) == 0xBB && at(b, i + 2) == 0xBF)
            && !(at(b, i + 1) == 0xBF && matches!(at(b, i + 2), 0xBE | 0xBF)))
}
