//! Chats through a template and stop strings: what the cache holds after
//! each turn is the template's text, tokenized as llama.cpp's chat does
//! (the new part of the rendered conversation appended), and errors leave
//! the conversation as it was.

use ferrocm_models::chat::{StopStrings, encode_prompt};
use ferrocm_models::{
    Arch, Chat, ChatMessage, Error, Llama, LoadOptions, SamplingOptions, Tokenizer,
    synthetic::SyntheticModel,
};
use ferrocm_ops::Device;
use ferrocm_ops::quant::gguf::Gguf;

fn file() -> Gguf {
    Gguf::from_bytes(
        SyntheticModel::new(Arch::Llama)
            .to_gguf()
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn turns_append_to_the_cache() {
    let g = file();
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
    let t = Tokenizer::from_gguf(&g).unwrap();
    let mut chat = Chat::new(&model, &t, SamplingOptions::greedy()).unwrap();
    let first = chat.send("Hello", 5, |_| true).unwrap();
    let rendered = t
        .apply_chat_template(&[ChatMessage::new("user", "Hello")], true)
        .unwrap();
    let mut expected = encode_prompt(&t, &rendered).unwrap();
    let prompt_len = expected.len();
    let tokens = chat.generation().tokens().to_vec();
    assert_eq!(tokens[..prompt_len], expected[..]);
    assert_eq!(t.decode(&tokens[prompt_len..]), first);
    expected = tokens;

    let second = chat.send("And then?", 5, |_| true).unwrap();
    let messages = chat.messages().to_vec();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[1], ChatMessage::new("assistant", first.clone()));
    assert_eq!(messages[3], ChatMessage::new("assistant", second.clone()));
    // Only the new text ran: "<|im_end|>\n<|im_start|>user\nAnd then?..." after the reply.
    let full = t.apply_chat_template(&messages[..3], true).unwrap();
    let delta = &full[(rendered.len() + first.len())..];
    assert!(delta.starts_with("<|im_end|>"), "{delta:?}");
    expected.extend(t.encode_with(delta, false, true).unwrap());
    let tokens = chat.generation().tokens();
    assert_eq!(tokens[..expected.len()], expected[..]);
    assert_eq!(t.decode(&tokens[expected.len()..]), second);
    // The second forward ran the new text (and the first reply's last
    // token when the reply ended at the token limit, not yet run).
    let delta_len = t.encode_with(delta, false, true).unwrap().len();
    let ran = chat.generation().stats().prompt_tokens;
    assert!(
        ran == delta_len || ran == delta_len + 1,
        "{ran} {delta_len}"
    );
}

#[test]
fn a_turn_past_the_context_leaves_the_chat_as_it_was() {
    let g = file();
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions { context: Some(40) }).unwrap();
    let t = Tokenizer::from_gguf(&g).unwrap();
    let mut chat = Chat::new(&model, &t, SamplingOptions::greedy())
        .unwrap()
        .with_system("Hi");
    chat.send("a", 3, |_| true).unwrap();
    let (messages, tokens) = (
        chat.messages().to_vec(),
        chat.generation().tokens().to_vec(),
    );
    match chat.send(
        "a long message that does not fit in what is left",
        3,
        |_| true,
    ) {
        Err(Error::ContextOverflow { context, .. }) => assert_eq!(context, 40),
        other => panic!("{other:?}"),
    }
    assert_eq!(chat.messages(), &messages[..]);
    assert_eq!(chat.generation().tokens(), &tokens[..]);
}

#[test]
fn a_chat_needs_a_template() {
    let g = file();
    let model = Llama::<f32>::load(&g, &Device::Cpu, &LoadOptions::default()).unwrap();
    let t = Tokenizer::from_gguf(
        &Gguf::open(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/tokenizer/spm.gguf"),
        )
        .unwrap(),
    )
    .unwrap();
    match Chat::new(&model, &t, SamplingOptions::greedy()) {
        Err(Error::Unsupported { why, .. }) => assert!(why.contains("chat_template"), "{why}"),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a chat without a template"),
    }
}

#[test]
fn stop_strings_hold_back_what_may_become_one() {
    let mut s = StopStrings::new(["</answer>", "ÉND"]);
    assert_eq!(s.push("The answer is 4"), ("The answer is 4".into(), false));
    assert_eq!(s.push(" </ans"), (" ".into(), false));
    // Not a stop after all: the held text comes out.
    assert_eq!(s.push("wer was"), ("</answer was".into(), false));
    assert_eq!(s.push(" É"), (" ".into(), false));
    assert_eq!(s.push("ND and more"), ("".into(), true));
    assert!(s.stopped());
    assert_eq!(s.push("ignored"), ("".into(), true));

    let mut s = StopStrings::new(["\n\n"]);
    assert_eq!(s.push("a\n"), ("a".into(), false));
    assert_eq!(s.finish(), "\n");
    // No stop strings: everything passes at once.
    let mut s = StopStrings::new(Vec::<String>::new());
    assert_eq!(s.push("x\n\n"), ("x\n\n".into(), false));
    // A stop inside one piece cuts it there.
    let mut s = StopStrings::new(["b", "cd"]);
    assert_eq!(s.push("acdb"), ("a".into(), true));
}
