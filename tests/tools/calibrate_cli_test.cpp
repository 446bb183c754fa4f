// `rinfer calibrate` and strategies.quantization.smoothing (SmoothQuant) end to end on a tiny
// random llama with outlier channels planted the way real models have them: two channels of
// every attention and MLP norm scaled up 40 times and the same columns of the matrices that
// read them scaled down as much, and one channel of v scaled up (its row) with the output
// projection's columns that read it (one a query head) scaled down, which leaves the float model
// as it was but makes those channels set the int8 activations' scales. The calibration file
// names those channels, and int8 with the smoothing it gives lands ten times closer to the float
// model than int8 without.
// Then the errors: a file of another model, a corrupt file, smoothing without int8 weights.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "../models/tiny_hf_model.h"
#include "cli_util.h"
#include "formats/calibration.h"
#include "test_util.h"
#include "tiny_model.h"

namespace rinfer {
namespace {

test::CommandResult rinfer(const std::string& args) { return test::rinfer_cli(args); }
using test::slurp;

constexpr float kPlant = 40.0f;
constexpr int kChannels[] = {5, 70};
constexpr int kHeadDim = 64;  // n_embd 128 over 2 heads (below)
constexpr int kVChannel = 9;  // of v's head: the attention output's channels 9 and 73

class CalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.n_layer = 4;
    spec_.n_embd = 128;
    spec_.n_head = 2;
    spec_.n_head_kv = 1;
    spec_.n_ff = 192;
    spec_.n_vocab = 96;  // the test tokenizer's (tiny_model.h)
    spec_.seed = 11;
    test::TinyWeights w = test::make_tiny_weights(spec_, /*round_to_bf16=*/false);
    for (int l = 0; l < spec_.n_layer; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      plant(w, p + "input_layernorm.weight",
            {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
             p + "self_attn.v_proj.weight"});
      plant(w, p + "post_attention_layernorm.weight",
            {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      test::TinyTensor& v = w.at(p + "self_attn.v_proj.weight");
      for (int64_t j = 0; j < v.shape[1]; ++j) {
        v.values[static_cast<size_t>(kVChannel * v.shape[1] + j)] *= kPlant;
      }
      test::TinyTensor& o = w.at(p + "self_attn.o_proj.weight");
      for (int64_t row = 0; row < o.shape[0]; ++row) {
        for (int h = 0; h < spec_.n_head; ++h) {
          o.values[static_cast<size_t>(row * o.shape[1] + h * kHeadDim + kVChannel)] /= kPlant;
        }
      }
    }
    dir_ = test::fresh_dir("calibrate");
    model_ = test::with_tiny_tokenizer(test::write_gguf_model("calibrate_planted", spec_, w),
                                       dir_ + "/planted.gguf");
    other_ = test::tiny_model_with_tokenizer(dir_);
    std::string cal, eval;
    for (int i = 0; i < 40; ++i) cal += "a quick brown fox jumps over the lazy dog, then naps. ";
    for (int i = 0; i < 40; ++i) eval += "the cat sat on the mat while rain fell on the roof. ";
    test::write_file(dir_ + "/cal.txt", cal);
    test::write_file(dir_ + "/eval.txt", eval);
  }

  // Norm channel c scaled up, the readers' column c scaled down: the same function in floats.
  static void plant(test::TinyWeights& w, const std::string& norm,
                    std::initializer_list<std::string> readers) {
    for (int c : kChannels) {
      w.at(norm).values[static_cast<size_t>(c)] *= kPlant;
      for (const std::string& r : readers) {
        test::TinyTensor& t = w.at(r);
        for (int64_t row = 0; row < t.shape[0]; ++row) {
          t.values[static_cast<size_t>(row * t.shape[1] + c)] /= kPlant;
        }
      }
    }
  }

  std::string recipe(const std::string& name, const std::string& model,
                     const std::string& quantization) const {
    const std::string path = dir_ + "/" + name + ".yaml";
    test::write_file(path, "model: " + model +
                               "\ndevice: cpu\nscenario: llm-chat\ncontext_length: 128\n"
                               "strategies:\n  threads: {count: 1}\n  quantization: " +
                               quantization + "\n");
    return path;
  }

  // rinfer eval of `r` against the float recipe on the evaluation text: its mean KL.
  double mean_kl(const std::string& r, const std::string& ref) {
    const std::string json = dir_ + "/eval.json";
    auto e = rinfer("eval '" + r + "' --vs '" + ref + "' --text '" + dir_ +
                    "/eval.txt' --tokens 240 --window 80 --json '" + json + "'");
    EXPECT_TRUE(e.exit_code == 0 || e.exit_code == 1) << e.out << e.err;
    auto j = nlohmann::json::parse(slurp(json), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << e.err;
    return j.is_discarded() ? -1.0 : j["metrics"]["mean_kl"].get<double>();
  }

  test::TinySpec spec_;
  std::string dir_, model_, other_;
};

TEST_F(CalibrateCli, SmoothingTakesThePlantedOutliersIntoTheWeights) {
  const std::string ref = recipe("ref", model_, "{activations: float}");
  const std::string file = dir_ + "/cal.json";
  auto r = rinfer("calibrate '" + ref + "' '" + dir_ + "/cal.txt' -o '" + file +
                  "' --alpha 0.5 --tokens 300 --window 100");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("300 tokens of " + dir_ + "/cal.txt in 3 windows"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wrote " + file), std::string::npos) << r.out;

  // The file: the model's shape, and in every layer the planted channels far above the rest.
  auto stats = read_calibration(file);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_EQ(stats->n_layer, spec_.n_layer);
  EXPECT_EQ(stats->n_embd, spec_.n_embd);
  EXPECT_EQ(stats->n_ff, spec_.n_ff);
  EXPECT_EQ(stats->q_dim, spec_.n_head * kHeadDim);
  for (const std::vector<float>& v : stats->down_in) {
    EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.0f);  // the MLP's activation was tapped
  }
  EXPECT_EQ(stats->tokens, 300);
  EXPECT_DOUBLE_EQ(stats->alpha, 0.5);
  EXPECT_EQ(stats->model, "planted.gguf");
  for (const auto* all : {&stats->attn_in, &stats->mlp_in}) {
    for (const std::vector<float>& v : *all) {
      std::vector<float> rest;
      for (int j = 0; j < spec_.n_embd; ++j) {
        if (j != kChannels[0] && j != kChannels[1]) rest.push_back(v[static_cast<size_t>(j)]);
      }
      const float most = *std::max_element(rest.begin(), rest.end());
      EXPECT_GT(most, 0.0f);
      for (int c : kChannels) EXPECT_GT(v[static_cast<size_t>(c)], 5.0f * most) << c;
    }
  }
  ASSERT_EQ(stats->o_in.size(), static_cast<size_t>(spec_.n_layer));
  for (const std::vector<float>& v : stats->o_in) {
    ASSERT_EQ(v.size(), static_cast<size_t>(spec_.n_head * kHeadDim));
    std::vector<float> rest;
    for (size_t j = 0; j < v.size(); ++j) {
      if (j % kHeadDim != kVChannel) rest.push_back(v[j]);
    }
    const float most = *std::max_element(rest.begin(), rest.end());
    EXPECT_GT(most, 0.0f);
    for (int h = 0; h < spec_.n_head; ++h) {
      EXPECT_GT(v[static_cast<size_t>(h * kHeadDim + kVChannel)], 5.0f * most) << h;
    }
  }

  EXPECT_FALSE(stats->smooth.o);  // by default: the norms' inputs and the activation
  EXPECT_TRUE(stats->smooth.attn && stats->smooth.mlp && stats->smooth.down);
  // Every input smoothed, the attention's output too.
  const std::string all = dir_ + "/cal_all.json";
  r = rinfer("calibrate '" + ref + "' '" + dir_ + "/cal.txt' -o '" + all +
             "' --alpha 0.5 --tokens 300 --window 100 --smooth attn,o_in,mlp,down");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("smoothing attn_in,o_in,mlp_in,down_in"), std::string::npos) << r.out;

  // int8 against the float model: without smoothing, with the default inputs smoothed, with
  // every input (v's planted channel then leaves the output projection's int8 input too).
  const double plain = mean_kl(recipe("int8", model_, "{weights: int8, keep_layers: []}"), ref);
  const double smoothed = mean_kl(
      recipe("int8_sq", model_, "{weights: int8, keep_layers: [], smoothing: cal.json}"), ref);
  const double every = mean_kl(
      recipe("int8_sq_all", model_, "{weights: int8, keep_layers: [], smoothing: cal_all.json}"),
      ref);
  EXPECT_GT(plain, 0.0);
  EXPECT_GT(every, 0.0);
  EXPECT_LT(smoothed, 0.5 * plain) << "plain " << plain << ", smoothed " << smoothed;
  EXPECT_LT(every, 0.5 * smoothed) << "smoothed " << smoothed << ", every input " << every;
  EXPECT_LT(every, 0.1 * plain) << "plain " << plain << ", every input " << every;
  std::printf("mean KL against the float model: int8 %.4g, smoothed %.4g, every input %.4g\n",
              plain, smoothed, every);

  // The knob is listed with its domain.
  r = rinfer("strategies quantization");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("smoothing"), std::string::npos) << r.out;
}

TEST_F(CalibrateCli, BadFilesAndSettingsAreClearErrors) {
  const std::string ref = recipe("ref", model_, "{activations: float}");
  const std::string file = dir_ + "/cal.json";
  ASSERT_EQ(rinfer("calibrate '" + ref + "' '" + dir_ + "/cal.txt' -o '" + file +
                   "' --tokens 100 --window 50")
                .exit_code,
            0);
  // Another model's shape.
  auto r = rinfer("run '" +
                  recipe("other", other_, "{weights: int8, keep_layers: [], smoothing: cal.json}") +
                  "' -p hi --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(file + ": calibrated on a model of 4 layers of width 128 and FFN 192 "
                              "(planted.gguf)"),
            std::string::npos)
      << r.err;
  // A corrupt file, a missing one, a negative maximum.
  test::write_file(dir_ + "/bad.json", "{\"format\": \"rinfer-calibration\", \"version\": 1");
  r = rinfer("run '" + recipe("bad", model_, "{weights: int8, smoothing: bad.json}") +
             "' -p hi --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.json: not a calibration file (not JSON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("strategies.quantization.smoothing"), std::string::npos) << r.err;
  r = rinfer("run '" + recipe("gone", model_, "{weights: int8, smoothing: gone.json}") +
             "' -p hi --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gone.json: no such file"), std::string::npos) << r.err;
  std::string text = slurp(file);
  const size_t at = text.find("\"attn_in_absmax\":[") + 18;
  text.insert(at, "-");
  test::write_file(dir_ + "/neg.json", text);
  r = rinfer("run '" + recipe("neg", model_, "{weights: int8, smoothing: neg.json}") +
             "' -p hi --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("layers[0].attn_in_absmax[0] is -"), std::string::npos) << r.err;
  // Smoothing without int8 weights.
  r = rinfer("run '" + recipe("q8", model_, "{weights: q8_0, smoothing: cal.json}") +
             "' -p hi --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("strategies.quantization.smoothing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("smooths the int8 (W8A8) conversion; the weights are q8_0"),
            std::string::npos)
      << r.err;
  // calibrate itself: an input smoothing does not take, a missing text.
  r = rinfer("calibrate '" + ref + "' '" + dir_ + "/cal.txt' -o '" + dir_ +
             "/x.json' --smooth attn,wo");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--smooth: 'wo' is not an input that smoothing takes (attn, o, mlp, down)"),
            std::string::npos)
      << r.err;
  r = rinfer("calibrate '" + ref + "' '" + dir_ + "/none.txt' -o '" + dir_ + "/x.json'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("none.txt"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(dir_ + "/x.json").empty());
}

// The file format alone: what is written reads back, and each kind of damage is named.
TEST(CalibrationFile, RoundTripAndFactor) {
  CalibrationStats c;
  c.model = "m.gguf";
  c.n_layer = 2;
  c.n_embd = 3;
  c.n_ff = 2;
  c.q_dim = 2;
  c.tokens = 10;
  c.alpha = 0.25;
  c.attn_in = {{1.0f, 2.5f, 0.0f}, {3.0f, 0.5f, 7.0f}};  // exact in four digits
  c.mlp_in = {{4.0f, 1.0f, 2.0f}, {0.25f, 9.0f, 1.0f}};
  c.down_in = {{6.0f, 0.125f}, {12.5f, 3.0f}};
  c.o_in = {{0.5f, 1.5f}, {2.0f, 0.0f}};
  c.smooth = {true, true, false, true};
  auto text = calibration_json(c);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const std::string dir = test::fresh_dir("calibration_file");
  test::write_file(dir + "/c.json", *text);
  auto back = read_calibration(dir + "/c.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->model, "m.gguf");
  EXPECT_EQ(back->tokens, 10);
  EXPECT_DOUBLE_EQ(back->alpha, 0.25);
  EXPECT_EQ(back->attn_in, c.attn_in);
  EXPECT_EQ(back->mlp_in, c.mlp_in);
  EXPECT_EQ(back->down_in, c.down_in);
  EXPECT_EQ(back->q_dim, 2);
  EXPECT_EQ(back->o_in, c.o_in);
  EXPECT_TRUE(back->smooth.attn && back->smooth.o && back->smooth.down);
  EXPECT_FALSE(back->smooth.mlp);
  EXPECT_EQ(smooth_inputs_text(back->smooth), "attn_in,o_in,down_in");

  // A version 1 file (no q_dim, no o_in_absmax) reads with its attention output unsmoothed.
  nlohmann::json v1 = nlohmann::json::parse(*text);
  v1["version"] = 1;
  v1.erase("q_dim");
  for (auto& l : v1["layers"]) l.erase("o_in_absmax");
  test::write_file(dir + "/v1.json", v1.dump());
  auto old = read_calibration(dir + "/v1.json");
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->q_dim, 0);
  EXPECT_TRUE(old->o_in.empty());
  EXPECT_EQ(old->down_in, c.down_in);
  EXPECT_EQ(smooth_inputs_text(old->smooth), "attn_in,mlp_in,down_in");
  // An unknown input in smooth; smooth missing.
  nlohmann::json bad_smooth = nlohmann::json::parse(*text);
  bad_smooth["smooth"].push_back("up_in");
  test::write_file(dir + "/s.json", bad_smooth.dump());
  auto s = read_calibration(dir + "/s.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("s.json: smooth: 'up_in' is not an input"), std::string::npos)
      << s.status().message();
  bad_smooth.erase("smooth");
  test::write_file(dir + "/s.json", bad_smooth.dump());
  s = read_calibration(dir + "/s.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'smooth' must be a list"), std::string::npos);
  // Version 2 without the attention output's maxima, or with a list of the wrong width.
  nlohmann::json v2 = nlohmann::json::parse(*text);
  v2["layers"][1].erase("o_in_absmax");
  test::write_file(dir + "/v2.json", v2.dump());
  auto miss = read_calibration(dir + "/v2.json");
  ASSERT_FALSE(miss.ok());
  EXPECT_NE(miss.status().message().find("layers[1]: 'o_in_absmax' is missing"), std::string::npos)
      << miss.status().message();
  v2 = nlohmann::json::parse(*text);
  v2["layers"][0]["o_in_absmax"].push_back(1.0);
  test::write_file(dir + "/v2.json", v2.dump());
  miss = read_calibration(dir + "/v2.json");
  ASSERT_FALSE(miss.ok());
  EXPECT_NE(miss.status().message().find("layers[0].o_in_absmax has 3 values, expected q_dim 2"),
            std::string::npos)
      << miss.status().message();

  c.mlp_in[1].pop_back();
  auto bad = calibration_json(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("layers[1].mlp_in_absmax has 2 values, expected n_embd 3"),
            std::string::npos)
      << bad.status().message();
  test::write_file(dir + "/v.json", "{\"format\": \"rinfer-calibration\", \"version\": 3}");
  auto v3 = read_calibration(dir + "/v.json");
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.status().message().find("version 3, this build reads versions 1 and 2"),
            std::string::npos);

  // act^a / w^(1-a): 16^0.5 / 4^0.5 = 2; a channel with no activation or no weight stays 1.
  EXPECT_FLOAT_EQ(smoothing_factor(16.0f, 4.0f, 0.5), 2.0f);
  EXPECT_FLOAT_EQ(smoothing_factor(8.0f, 2.0f, 1.0), 8.0f);
  EXPECT_FLOAT_EQ(smoothing_factor(8.0f, 2.0f, 0.0), 0.5f);
  EXPECT_FLOAT_EQ(smoothing_factor(0.0f, 2.0f, 0.5), 1.0f);
  EXPECT_FLOAT_EQ(smoothing_factor(3.0f, 0.0f, 0.5), 1.0f);
  EXPECT_FLOAT_EQ(smoothing_factor(1e12f, 1e-12f, 0.5), 1e5f);
}

}  // namespace
}  // namespace rinfer
