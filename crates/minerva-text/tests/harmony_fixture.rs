//! gpt-oss: the fixture's harmony-like template, the harmony renderer's prompt as tokens of the
//! gpt_oss vocabulary, and a reply parsed as it streams token by token.

mod common;

use common::{fixtures, gguf_metadata, read_json};
use minerva_text::{
    harmony, ChatTemplate, Detokenizer, HarmonyOptions, HarmonyParser, HarmonyStop, Message,
    OutputPiece, OutputSplitter, PromptBuilder, PromptKind, ReasoningEffort, Tokenizer,
};

fn chat() -> Vec<Message> {
    let reference = read_json("gpt_oss/f32/reference.json");
    serde_json::from_value(reference["chat_messages"].clone()).unwrap()
}

#[test]
fn harmony_prompt_has_the_format_shape() {
    let tok = Tokenizer::from_folder(&fixtures().join("gpt_oss/f32")).unwrap();
    let options = HarmonyOptions {
        reasoning_effort: ReasoningEffort::Low,
        ..HarmonyOptions::default()
    };
    let prompt = harmony::render(&chat(), &options, true);
    // The fixture template renders the same conversation without the system header lines.
    let template = ChatTemplate::from_folder(&fixtures().join("gpt_oss/f32"))
        .unwrap()
        .unwrap();
    let plain = template.render(&chat(), true).unwrap();
    assert!(
        plain.ends_with("<|start|>user<|message|>What is two plus two?<|end|><|start|>assistant")
    );
    assert!(
        prompt.ends_with("<|start|>user<|message|>What is two plus two?<|end|><|start|>assistant")
    );
    assert!(prompt.starts_with("<|start|>system<|message|>You are ChatGPT"));
    assert!(prompt.contains("\nReasoning: low\n"));
    assert!(prompt.contains(
        "<|start|>developer<|message|># Instructions\n\nYou are a tiny test model.<|end|>"
    ));

    // Special tokens are single ids: <|start|>=2, <|end|>=3, <|message|>=4.
    let ids = tok.encode(&prompt, false).unwrap();
    let count = |id: u32| ids.iter().filter(|&&i| i == id).count();
    assert_eq!((count(2), count(3), count(4)), (4, 3, 3));
    assert_eq!(tok.decode(&ids, false).unwrap(), prompt);
    assert_eq!(harmony::stop_token_ids(&tok), [6]);
}

#[test]
fn reply_streamed_by_tokens_is_split_into_channels() {
    let reply = "<|channel|>analysis<|message|>Two plus two is four.<|end|>\
                 <|start|>assistant<|channel|>final<|message|>4 — that's it.<|return|>";
    for tok in [
        Tokenizer::from_folder(&fixtures().join("gpt_oss/f32")).unwrap(),
        Tokenizer::from_gguf_metadata(&gguf_metadata("gpt_oss"), "gpt_oss").unwrap(),
    ] {
        let ids = tok.encode(reply, false).unwrap();
        let mut detok = Detokenizer::new(false);
        let mut parser = HarmonyParser::new();
        let mut splitter = OutputSplitter::Harmony(HarmonyParser::new());
        let (mut reasoning, mut answer) = (String::new(), String::new());
        for &id in &ids {
            let text = detok.push(&tok, id).unwrap();
            parser.push(&text);
            for piece in splitter.push(&text) {
                match piece {
                    OutputPiece::Reasoning(t) => reasoning.push_str(&t),
                    OutputPiece::Answer(t) => answer.push_str(&t),
                }
            }
            if tok.is_eos(id) {
                break;
            }
        }
        assert_eq!(parser.analysis(), "Two plus two is four.");
        assert_eq!(parser.final_text(), "4 — that's it.");
        assert_eq!(parser.stop_reason(), Some(HarmonyStop::Return));
        assert_eq!(
            (reasoning.as_str(), answer.as_str()),
            ("Two plus two is four.", "4 — that's it.")
        );
        assert!(splitter.is_done());
        let history = harmony::render(
            &[Message::user("2+2?"), parser.history_message()],
            &HarmonyOptions::default(),
            false,
        );
        assert!(history.ends_with("<|channel|>final<|message|>4 — that's it.<|end|>"));
    }
}

#[test]
fn prompt_builder_picks_template_or_fallback() {
    let with_template = PromptBuilder::from_template(
        ChatTemplate::from_folder(&fixtures().join("qwen3/f32")).unwrap(),
    );
    assert_eq!(with_template.kind(), PromptKind::Template);
    let reference = read_json("qwen3/f32/reference.json");
    assert_eq!(
        with_template.render(&chat(), true).unwrap(),
        reference["chat_rendered"].as_str().unwrap()
    );
    let tok = Tokenizer::from_folder(&fixtures().join("llama/f32")).unwrap();
    let llama = PromptBuilder::from_template(
        ChatTemplate::from_folder(&fixtures().join("llama/f32")).unwrap(),
    );
    let ids = llama
        .encode(&tok, &llama.render(&chat(), true).unwrap())
        .unwrap();
    let llama_reference = read_json("llama/f32/reference.json");
    assert_eq!(
        ids,
        common::ids(&llama_reference["chat_rendered_ids_no_extra_special"]),
        "one BOS, from the template"
    );
    let plain = PromptBuilder::from_template(None);
    assert_eq!(
        plain.encode(&tok, "Hi").unwrap()[0],
        1,
        "the fallback prompt gets BOS from the tokenizer"
    );
    assert_eq!(plain.kind(), PromptKind::Plain);
    assert_eq!(
        plain.render(&chat(), true).unwrap(),
        "System: You are a tiny test model.\n\nUser: What is two plus two?\n\nAssistant:"
    );
}
