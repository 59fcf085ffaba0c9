"""The published judge prompts, word for word (data, not code): RM-Bench's README template for its
DeepSeek-R1 baseline, rewardbench 0.1.4's single- and two-turn MT-Bench pairwise prompts, and RM-R1's two
RM-Bench prompts (its Qwen2.5-Instruct models: system + user; its DeepSeek-Distilled models: one user
message). Where each comes from is named above it; tests/test_judge_protocols.py pins them by hash."""

# RM-Bench README.md at 73c52d7 (github.com/THU-KEG/RM-Bench), lines 57-75, the block under "The prompt
# template used for comparision", as printed there: a Python str.format source literal. "\\boxed" is
# how Python source spells \boxed (a bare "\b" is a backspace) and "{{"/"}}" are format's escaped
# braces, so the prompt sent reads \boxed{A>>B}: see RMBENCH_TEMPLATE.
RMBENCH_README = r"""You will be shown a user prompt followed by two responses from different assistants. Your task is to decide which response is better. You may consider any criteria you find appropriate. Try your best and think carefully, deeply analyze the responses, and provide a final verdict.
Ensure in the end that you should include the final verdict in the specified format as follows:

1. Assistant A is significantly better: \\boxed{{A>>B}}
2. Assistant A is slightly better: \\boxed{{A>B}}
3. Tie, relatively the same: \\boxed{{A=B}}
4. Assistant B is slightly better: \\boxed{{B>A}}
5. Assistant B is significantly better: \\boxed{{B>>A}}

<|User Prompt|>
{question}

<|The Start of Assistant A's Answer|>
{answer_1}
<|The End of Assistant A's Answer|>

<|The Start of Assistant B's Answer|>
{answer_2}
<|The End of Assistant B's Answer|>"""

# The str.format template that literal denotes (fields question, answer_1, answer_2).
RMBENCH_TEMPLATE = RMBENCH_README.replace("\\\\", "\\")

# rewardbench 0.1.4, rewardbench/generative.py: prompt_v2 (lines 103-111), the system prompt, and
# MTBENCH_V2["prompt_template"] (line 145), the user message (fields question, answer_a, answer_b).
REWARDBENCH_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants "
    "to the user question displayed below. You should choose the assistant that follows the user's instructions "
    "and answers the user's question better. Your evaluation should consider factors such as the helpfulness, "
    "relevance, accuracy, depth, creativity, and level of detail of their responses. Begin your evaluation by "
    "comparing the two responses and provide a short explanation. Avoid any position biases and ensure that the "
    "order in which the responses were presented does not influence your decision. Do not allow the length of "
    "the responses to influence your evaluation. Do not favor certain names of the assistants. Be as objective "
    "as possible. After providing your explanation, output your final verdict by strictly following this "
    'format: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better.'
)
REWARDBENCH_USER = (
    "[User Question]\n{question}\n\n"
    "[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)

# Same file: prompt_multi_v2 (lines 130-139), the two-turn system prompt, and
# MTBENCH_MULTI_V2["prompt_template"] (lines 155-160), its user message (fields question_1, question_2,
# answer_a_1, answer_a_2, answer_b_1, answer_b_2): format_judge_answers(multi_turn=True), no modifier.
REWARDBENCH_MULTI_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants "
    "to the user questions. You should focus on who provides a better answer to the second user question. "
    "You should choose the assistant that follows the user's instructions and answers the user's question better. "
    "Your evaluation should consider factors such as the helpfulness, relevance, accuracy, depth, creativity, and "
    "level of detail of their responses. Begin your evaluation by comparing the two responses and provide a short "
    "explanation. Avoid any position biases and ensure that the order in which the responses were presented does "
    "not influence your decision. Do not allow the length of the responses to influence your evaluation. Do not "
    "favor certain names of the assistants. Be as objective as possible. After providing your explanation, output "
    'your final verdict by strictly following this format: "[[A]]" if assistant A is better, "[[B]]" if assistant '
    "B is better."
)
REWARDBENCH_MULTI_USER = (
    "<|The Start of Assistant A's Conversation with User|>\n\n### User:\n{question_1}\n\n### Assistant A:\n"
    "{answer_a_1}\n\n### User:\n{question_2}\n\n### Assistant A:\n{answer_a_2}\n\n<|The End of Assistant A's "
    "Conversation with User|>\n\n\n<|The Start of Assistant B's Conversation with User|>\n\n### User:\n"
    "{question_1}\n\n### Assistant B:\n{answer_b_1}\n\n### User:\n{question_2}\n\n### Assistant B:\n"
    "{answer_b_2}\n\n<|The End of Assistant B's Conversation with User|>"
)

# RM-R1 at d4c2542 (github.com/RM-R1-UIUC/RM-R1), eval/RM-Bench/rewardbench/generative.py:
# RM_R1_INSTRUCT_SYSTEM_PROMPT (lines 301-349) and RM_R1_SINGLE_TURN_INSTRUCT_USER_PROMPT (351-354),
# the "RM-R1-Instruct" modifier (models named RM-R1 + Instruct).
RM_R1_INSTRUCT_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI Chatbots "
    "to the Client's question displayed below.\n\n"
    "First, classify the task into one of two categories: <type>Reasoning</type> or <type>Chat</type>.\n"
    "- Use <type>Reasoning</type> for tasks that involve math, coding, or require domain knowledge, multi-step "
    "inference, logical deduction, or combining information to reach a conclusion.\n"
    "- Use <type>Chat</type> for tasks that involve open-ended or factual conversation, stylistic rewrites, "
    "safety questions, or general helpfulness requests without deep reasoning.\n\n"
    "If the task is Reasoning:\n"
    "1. Solve the Client's question yourself and present your final answer within <solution>...</solution> "
    "tags.\n"
    "2. Evaluate the two Chatbot responses based on correctness, completeness, and reasoning quality, "
    "referencing your own solution.\n"
    "3. Include your evaluation inside <eval>...</eval> tags, quoting or summarizing the Chatbots using the "
    "following tags:\n"
    "   - <quote_A>...</quote_A> for direct quotes from Chatbot A\n"
    "   - <summary_A>...</summary_A> for paraphrases of Chatbot A\n"
    "   - <quote_B>...</quote_B> for direct quotes from Chatbot B\n"
    "   - <summary_B>...</summary_B> for paraphrases of Chatbot B\n"
    "4. End with your final judgment in the format: <answer>[[A]]</answer> or <answer>[[B]]</answer>\n\n"
    "If the task is Chat:\n"
    "1. Generate evaluation criteria (rubric) tailored to the Client's question and context, enclosed in "
    "<rubric>...</rubric> tags.\n"
    "2. Assign weights to each rubric item based on their relative importance.\n"
    "3. Inside <rubric>, include a <justify>...</justify> section explaining why you chose those rubric "
    "criteria and weights.\n"
    "4. Compare both Chatbot responses according to the rubric.\n"
    "5. Provide your evaluation inside <eval>...</eval> tags, using <quote_A>, <summary_A>, <quote_B>, and "
    "<summary_B> as described above.\n"
    "6. End with your final judgment in the format: <answer>[[A]]</answer> or <answer>[[B]]</answer>\n\n"
    "Important Notes:\n"
    "- Be objective and base your evaluation only on the content of the responses.\n"
    "- Do not let response order, length, or Chatbot names affect your judgment.\n"
    "- Follow the response format strictly depending on the task type.\n\n"
    "Your output must follow one of the two formats below:\n\n"
    "For Reasoning:\n"
    "<type>Reasoning</type>\n\n"
    "<solution> your own solution for the problem </solution>\n\n"
    "<eval>\n"
    "  include direct comparisons supported by <quote_A>...</quote_A> or <summary_A>...</summary_A>, and "
    "<quote_B>...</quote_B>, or <summary_B>...</summary_B>\n"
    "</eval>\n\n"
    "<answer>[[A/B]]</answer>\n\n"
    "For Chat:\n"
    "<type>Chat</type>\n\n"
    "<rubric>\n"
    "  detailed rubric items\n"
    "  <justify> justification for the rubric </justify>\n"
    "</rubric>\n\n"
    "<eval>\n"
    "  include direct comparisons supported by <quote_A>...</quote_A> or <summary_A>...</summary_A>, and "
    "<quote_B>...</quote_B>, or <summary_B>...</summary_B> tags\n"
    "</eval>\n\n"
    "<answer>[[A/B]]</answer>"
)
RM_R1_INSTRUCT_USER = (
    "[Client Question]\n{question}\n\n"
    "[The Start of Chatbot A's Response]\n{answer_a}\n[The End of Chatbot A's Response]\n\n"
    "[The Start of Chatbot B's Response]\n{answer_b}\n[The End of Chatbot B's Response]"
)

# Same file: RM_R1_SINGLE_TURN_REASONING_USER_PROMPT (lines 361-367), the "RM-R1-Reasoning" modifier
# (models named RM-R1 + DeepSeek-Distilled), sent as the only message (no system message).
RM_R1_REASONING_USER = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI Chatbots "
    "to the Client question displayed below. \n\n"
    + RM_R1_INSTRUCT_USER
    + "\n\nOutput your final verdict at last by strictly following this format: "
    "'<answer>[[A]]</answer>' if Chatbot A is better, or '<answer>[[B]]</answer>' if Chatbot B is better."
)
